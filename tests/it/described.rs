//! A sender described in the config (`[[schemes]]`, README "Senders
//! described as data"), end to end through a real gateway: a delivery
//! signed the way the description says is forwarded once and its retry
//! answered from the record; a stale, forged or unsigned one is refused
//! with its code and reaches nothing; a description that cannot work is a
//! config error that names its entry and field, and a vector in it that
//! does not verify is one too.

use std::process::Command;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{Request, StatusCode};
use http_body_util::Full;
use sha2::Sha256;

use crate::support::*;

const SIGNING: &str = "acme-signing-secret-0123456789";

fn scheme(vectors: &str) -> String {
    format!(
        r#"
[[schemes]]
name = "acme"
algorithm = "hmac-sha256"
signature = {{ header = "X-Acme-Signature", encoding = "hex", prefix = "sha256=" }}
signed = "{{header:X-Acme-Timestamp}}.{{body}}"
timestamp = {{ header = "X-Acme-Timestamp", unit = "s", tolerance = "5m" }}
key = ["header:X-Acme-Delivery"]
retention = "3d"
{vectors}"#
    )
}

fn config(upstream: &Upstream, dir: &std::path::Path, scheme: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
backend = "embedded"
path = "{db}"

[[routes]]
name = "acme"
path = "/acme"
upstream = "{upstream}"

[routes.verify]
scheme = "acme"
secrets = ["{SIGNING}"]
{scheme}"#,
        db = dir.join("hookgate.db").display(),
        upstream = upstream.url("/acme"),
    )
}

fn signature(timestamp: u64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SIGNING.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.{body}").as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn now() -> u64 {
    hookgate::clock::wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn delivery(url: &str, id: &str, timestamp: u64, signed: &str, body: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .header("x-acme-delivery", id)
        .header("x-acme-timestamp", timestamp.to_string())
        .header("x-acme-signature", signature(timestamp, signed))
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

#[tokio::test]
async fn a_described_sender_is_verified_and_deduplicated_like_a_shipped_one() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&config(&upstream, dir.path(), &scheme(""))).await;
    let (sender, url) = (Sender::new(), gateway.url("/acme"));
    let body = r#"{"type":"invoice.paid","amount":4200}"#;

    let first = sender
        .send(delivery(&url, "dlv_1", now(), body, body))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    let retry = sender
        .send(delivery(&url, "dlv_1", now(), body, body))
        .await;
    assert!(retry.replayed(), "the retry is answered from the record");
    assert_eq!(upstream.total(), 1);

    let stale = now() - 600;
    let late = sender
        .send(delivery(&url, "dlv_2", stale, body, body))
        .await;
    assert_eq!(late.status, StatusCode::UNAUTHORIZED);
    assert_eq!(late.code(), "timestamp_out_of_tolerance");
    let forged = sender
        .send(delivery(&url, "dlv_3", now(), body, r#"{"amount":1}"#))
        .await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(forged.code(), "signature_invalid");
    let unsigned = Request::post(&url)
        .header("x-acme-delivery", "dlv_4")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    assert_eq!(sender.send(unsigned).await.code(), "signature_invalid");
    assert_eq!(upstream.total(), 1, "nothing refused reached the upstream");
    for id in ["dlv_2", "dlv_3", "dlv_4"] {
        assert!(
            gateway.record("acme", id).await.is_none(),
            "{id} left a record"
        );
    }
    gateway.shutdown().await;
}

/// `hookgate check` on a config, the real binary: its exit code and what it
/// printed.
fn check(dir: &std::path::Path, text: &str) -> (i32, String) {
    let file = dir.join("gateway.toml");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), said)
}

#[tokio::test]
async fn a_description_that_cannot_work_is_a_located_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let good = config(&upstream, dir.path(), &scheme(""));
    let (code, said) = check(dir.path(), &good);
    assert_eq!(code, 0, "{said}");

    for (wrong, right, field) in [
        (
            "{header:X-Acme-Timestamp}.{body}",
            "{timestamp}.{body}",
            "schemes[0].signed",
        ),
        ("hmac-sha256", "md5", "schemes[0].algorithm"),
        ("name = \"acme\"", "name = \"github\"", "schemes[0].name"),
        (
            "unit = \"s\"",
            "unit = \"hours\"",
            "schemes[0].timestamp.unit",
        ),
    ] {
        let text = good.replace(wrong, right);
        let (code, said) = check(dir.path(), &text);
        assert_ne!(code, 0, "{right}: {said}");
        assert!(said.contains(field), "{right}: {said}");
        assert!(said.contains("gateway.toml:"), "located: {said}");
    }

    // A vector that does not verify: the description is wrong somewhere.
    let body = r#"{"n":1}"#;
    let vector = format!(
        "[[schemes.vectors]]\nsecret = \"{SIGNING}\"\nbody = '{body}'\nat = 1733230000\n\
         headers = {{ \"X-Acme-Timestamp\" = \"1733230000\", \"X-Acme-Signature\" = \"{}\" }}\n",
        signature(1_733_230_000, body)
    );
    let (code, said) = check(dir.path(), &config(&upstream, dir.path(), &scheme(&vector)));
    assert_eq!(code, 0, "a vector that verifies: {said}");
    let swapped = vector.replace("sha256=", "sha256=00");
    let (code, said) = check(
        dir.path(),
        &config(&upstream, dir.path(), &scheme(&swapped)),
    );
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("schemes[0].vectors[0]"), "{said}");
}
