//! A sender described in the config (`[[schemes]]`, docs/guide/senders.md,
//! "Senders described as data"), end to end through a real gateway: a delivery
//! signed the way the description says is forwarded once and its retry
//! answered from the record; a stale, forged or unsigned one is refused
//! with its code and reaches nothing; a description that cannot work is a
//! config error that names its entry and field, and a vector in it that
//! does not verify is one too. The shipped senders' handshakes — Meta's
//! GET `hub.challenge`, X's CRC, Twitch's signed callback verification —
//! are answered by the gateway, counted, and reach no upstream.

use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{Request, StatusCode};
use http_body_util::Full;
use sha2::Sha256;

use crate::support::*;

const SIGNING: &str = "acme-signing-secret-0123456789";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

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
    shipped(upstream, dir, "acme", "") + scheme
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
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
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
            gateway.record("hook", id).await.is_none(),
            "{id} left a record"
        );
    }
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_description_that_cannot_work_is_a_located_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let good = config(&upstream, dir.path(), &scheme(""));
    let (code, said) = check_config(dir.path(), &good);
    assert_eq!(code, 0, "{said}");

    for (wrong, right, field) in [
        (
            "{header:X-Acme-Timestamp}.{body}",
            "{stamp}.{body}",
            "schemes[0].signed",
        ),
        ("hmac-sha256", "md5", "schemes[0].algorithm"),
        ("name = \"acme\"", "name = \"github\"", "schemes[0].name"),
        (
            "unit = \"s\"",
            "unit = \"hours\"",
            "schemes[0].timestamp.unit",
        ),
        // A timestamp the signature does not cover guards nothing.
        (
            "{header:X-Acme-Timestamp}.{body}",
            "{body}",
            "schemes[0].timestamp",
        ),
    ] {
        let text = good.replace(wrong, right);
        let (code, said) = check_config(dir.path(), &text);
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
    let (code, said) = check_config(dir.path(), &config(&upstream, dir.path(), &scheme(&vector)));
    assert_eq!(code, 0, "a vector that verifies: {said}");
    let swapped = vector.replace("sha256=", "sha256=00");
    let (code, said) = check_config(
        dir.path(),
        &config(&upstream, dir.path(), &scheme(&swapped)),
    );
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("schemes[0].vectors[0]"), "{said}");
}

/// A route on shipped sender `scheme` (with `extra` in its verify table),
/// its metrics on an admin listener.
fn shipped(upstream: &Upstream, dir: &std::path::Path, scheme: &str, extra: &str) -> String {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
backend = "embedded"
path = "{db}"

[[routes]]
name = "hook"
path = "/hook"
upstream = "{upstream}"

[routes.verify]
scheme = "{scheme}"
secrets = ["{SIGNING}"]
{extra}
"#,
        db = dir.join("hookgate.db").display(),
        upstream = upstream.url("/hook"),
    );
    with_admin(&text, true)
}

fn hex_mac(parts: &[&str]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SIGNING.as_bytes()).unwrap();
    for part in parts {
        mac.update(part.as_bytes());
    }
    hex::encode(mac.finalize().into_bytes())
}

async fn handshakes_counted(gateway: &TestGateway) -> f64 {
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let labels = [("route", "hook"), ("outcome", "handshake")];
    sample(&metrics, "hookgate_requests_total", &labels).unwrap_or(0.0)
}

/// Meta's subscription check: a GET the gateway answers itself, only with
/// the route's verify token; the deliveries after it are signed POSTs.
#[tokio::test]
async fn metas_subscription_check_is_answered_only_with_the_routes_token() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let text = shipped(
        &upstream,
        dir.path(),
        "meta",
        "handshake_token = \"verify-me-0123\"",
    );
    let gateway = TestGateway::start(&text).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    let get = |query: &str| {
        let request = Request::get(format!("{url}?{query}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        sender.send(request)
    };

    let subscribe = "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=verify-me-0123";
    let answer = get(subscribe).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(&answer.body[..], b"1158201444");
    assert_eq!(answer.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(answer.headers["x-content-type-options"], "nosniff");
    let wrong = get("hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=guess").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.code(), "signature_invalid");
    let hostile = get("hub.mode=subscribe&hub.challenge=%3Cb%3E&hub.verify_token=verify-me-0123");
    assert_eq!(hostile.await.status, StatusCode::UNAUTHORIZED, "not echoed");
    assert_eq!(handshakes_counted(&gateway).await, 1.0);

    let body = r#"{"object":"page","entry":[{"id":"1","time":1733230000,"changes":[]}]}"#;
    let signed = Request::post(&url)
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hex_mac(&[body])),
        )
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    assert_eq!(sender.send(signed).await.status, StatusCode::OK);
    assert_eq!(
        upstream.total(),
        1,
        "only the delivery reached the upstream"
    );
    gateway.shutdown().await;

    // Without its token the route does not load.
    let (code, said) = check_config(dir.path(), &shipped(&upstream, dir.path(), "meta", ""));
    assert_ne!(code, 0);
    assert!(said.contains("routes[0].verify.handshake_token"), "{said}");
}

/// X's challenge-response check: the CRC is the HMAC of `crc_token` under
/// the consumer secret, answered by the gateway.
#[tokio::test]
async fn xs_crc_is_answered_with_the_hmac_of_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&shipped(&upstream, dir.path(), "twitter", "")).await;
    let url = gateway.url("/hook?crc_token=crc_9a8b7c6d");
    let request = Request::get(url).body(Full::new(Bytes::new())).unwrap();
    let answer = Sender::new().send(request).await;
    assert_eq!(answer.status, StatusCode::OK);
    let mut mac = Hmac::<Sha256>::new_from_slice(SIGNING.as_bytes()).unwrap();
    mac.update(b"crc_9a8b7c6d");
    let expected = format!("sha256={}", B64.encode(mac.finalize().into_bytes()));
    assert_eq!(answer.json()["response_token"], expected.as_str());
    assert_eq!(upstream.total(), 0);
    gateway.shutdown().await;
}

/// The CRC of `token` on `gateway`'s route `/hook`, as anyone may ask for
/// it: the tag under the route's secret.
async fn crc_of(gateway: &TestGateway, token: &str) -> Vec<u8> {
    let url = gateway.url(&format!("/hook?crc_token={token}"));
    let request = Request::get(url).body(Full::new(Bytes::new())).unwrap();
    let answer = Sender::new().send(request).await;
    assert_eq!(answer.status, StatusCode::OK);
    let token = answer.json()["response_token"].as_str().unwrap().to_owned();
    B64.decode(token.strip_prefix("sha256=").unwrap()).unwrap()
}

/// A CRC answer is never a delivery's signature: a body that could be a
/// challenge is refused on X's route however it is signed, while a real
/// (JSON) delivery is forwarded.
#[tokio::test]
async fn an_x_crc_answer_signs_no_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&shipped(&upstream, dir.path(), "twitter", "")).await;
    let sender = Sender::new();
    let post = |body: &str, tag: &[u8]| {
        Request::post(gateway.url("/hook"))
            .header(
                "x-twitter-webhooks-signature",
                format!("sha256={}", B64.encode(tag)),
            )
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap()
    };
    let forged = crc_of(&gateway, "amount=1000000").await;
    let answer = sender.send(post("amount=1000000", &forged)).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.code(), "signature_invalid");
    assert_eq!(upstream.total(), 0, "nothing forged reached the upstream");

    let body = r#"{"for_user_id":"2244994945","tweet_create_events":[{"id_str":"1"}]}"#;
    let mut mac = Hmac::<Sha256>::new_from_slice(SIGNING.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let real = sender.send(post(body, &mac.finalize().into_bytes())).await;
    assert_eq!(real.status, StatusCode::OK, "a real delivery is forwarded");
    assert_eq!(upstream.total(), 1);
    gateway.shutdown().await;
}

/// The same on a described scheme that signs a timestamp the sender
/// chooses: the attacker picks the timestamp too, and is still refused.
#[tokio::test]
async fn a_described_crc_answer_signs_no_delivery_whatever_its_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let handshake = "handshake = { challenge = \"query:crc_token\", answer = \"crc-sha256\" }\n";
    let gateway = TestGateway::start(&config(&upstream, dir.path(), &scheme(handshake))).await;
    let at = now();
    let tag = crc_of(&gateway, &format!("{at}.amount=1000000")).await;
    let forged = Request::post(gateway.url("/hook"))
        .header("x-acme-delivery", "d_forged")
        .header("x-acme-timestamp", at.to_string())
        .header("x-acme-signature", format!("sha256={}", hex::encode(tag)))
        .body(Full::new(Bytes::from("amount=1000000")))
        .unwrap();
    let answer = Sender::new().send(forged).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.code(), "signature_invalid");
    assert_eq!(upstream.total(), 0);
    gateway.shutdown().await;
}

/// Twitch's callback verification is a signed POST: answered with its
/// challenge once verified; a forged one is refused; a notification after
/// it is forwarded.
#[tokio::test]
async fn twitchs_callback_verification_is_answered_once_verified() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&shipped(&upstream, dir.path(), "twitch", "")).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    let twitch = |id: &str, kind: &str, body: &str, signature: Option<String>| {
        let at = "2026-12-03T12:00:00.000Z";
        let signature = signature.unwrap_or_else(|| format!("sha256={}", hex_mac(&[id, at, body])));
        Request::post(&url)
            .header("twitch-eventsub-message-id", id)
            .header("twitch-eventsub-message-timestamp", at)
            .header("twitch-eventsub-message-type", kind)
            .header("twitch-eventsub-message-signature", signature)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap()
    };
    let verification = r#"{"challenge":"pogchamp-kappa-360noscope-vohiyo"}"#;
    let kind = "webhook_callback_verification";
    let answer = sender.send(twitch("m1", kind, verification, None)).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(&answer.body[..], b"pogchamp-kappa-360noscope-vohiyo");
    let forged = twitch(
        "m2",
        kind,
        verification,
        Some(format!("sha256={}", "0".repeat(64))),
    );
    assert_eq!(sender.send(forged).await.status, StatusCode::UNAUTHORIZED);
    let event = r#"{"subscription":{"type":"channel.follow"},"event":{"user_id":"1337"}}"#;
    let forwarded = sender.send(twitch("m3", "notification", event, None)).await;
    assert_eq!(forwarded.status, StatusCode::OK);
    assert_eq!(upstream.total(), 1, "the handshake reached no upstream");
    assert_eq!(handshakes_counted(&gateway).await, 1.0);
    gateway.shutdown().await;
}
