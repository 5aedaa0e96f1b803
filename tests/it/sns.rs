//! AWS SNS, the sender whose key is fetched (docs/guide/senders.md, "Supported senders"), through a
//! real gateway against a local HTTPS server standing in for SNS, with its
//! own CA: messages signed with the `openssl` command (RSA, SHA-256 and
//! SHA-1) under a certificate that server publishes.
//!
//! Eight concurrent copies of a notification reach the upstream once and
//! the certificate is fetched once; a tampered message, a certificate URL
//! outside the allowlist (never fetched), an unlisted topic, and a
//! certificate that cannot be fetched (503, so SNS retries; fetched once
//! for three deliveries) reach nothing;
//! a subscription confirmation is confirmed by the gateway and never
//! forwarded.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::support::*;

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders";

/// The signing key and certificate SNS would hold: made by `openssl`.
struct Signer {
    dir: tempfile::TempDir,
}

impl Signer {
    fn new() -> Signer {
        let dir = tempfile::tempdir().unwrap();
        let made = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=sns.amazonaws.com", "-keyout", "key.pem"])
            .args(["-out", "cert.pem"])
            .current_dir(dir.path())
            .output()
            .expect("openssl is installed (.ci/run installs it)");
        assert!(made.status.success(), "{made:?}");
        Signer { dir }
    }

    fn cert(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("cert.pem")).unwrap()
    }

    /// `message` with its `Signature`: `openssl dgst -sign` over the
    /// fields SNS signs, as AWS documents them.
    fn sign(&self, mut message: Value, version: &str) -> Value {
        let kind = message["Type"].as_str().unwrap().to_owned();
        let fields: &[&str] = if kind == "Notification" {
            &[
                "Message",
                "MessageId",
                "Subject",
                "Timestamp",
                "TopicArn",
                "Type",
            ]
        } else {
            &[
                "Message",
                "MessageId",
                "SubscribeURL",
                "Timestamp",
                "Token",
                "TopicArn",
                "Type",
            ]
        };
        let text: String = (fields.iter())
            .filter_map(|name| Some(format!("{name}\n{}\n", message[*name].as_str()?)))
            .collect();
        let path = self.dir.path().join("text");
        std::fs::write(&path, text).unwrap();
        let digest = if version == "1" { "-sha1" } else { "-sha256" };
        let signed = Command::new("openssl")
            .args(["dgst", digest, "-sign", "key.pem", "text"])
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        assert!(signed.status.success(), "{signed:?}");
        message["SignatureVersion"] = json!(version);
        message["Signature"] =
            json!(base64::engine::general_purpose::STANDARD.encode(&signed.stdout));
        message
    }
}

/// SNS's side: the certificate at `/cert.pem`, a failing `/down.pem`, and
/// the subscription's confirmation URL.
async fn sns(pki: &Pki, cert: String) -> Upstream {
    Upstream::tls_with(pki.server_config("sns"), move |seen| {
        let (status, body) = match seen.uri.split('?').next().unwrap() {
            "/cert.pem" => (StatusCode::OK, cert.clone()),
            "/down.pem" => (StatusCode::SERVICE_UNAVAILABLE, String::new()),
            "/" if seen.uri.contains("Action=ConfirmSubscription") => {
                (StatusCode::OK, "<ConfirmSubscriptionResponse/>".into())
            }
            _ => (StatusCode::NOT_FOUND, String::new()),
        };
        Plan {
            status,
            delay: std::time::Duration::ZERO,
            headers: vec![],
            body,
        }
    })
    .await
}

fn config(upstream: &Upstream, sns: &Upstream, pki: &Pki, dir: &Path) -> String {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
backend = "embedded"
path = "{db}"

[[routes]]
name = "sns"
path = "/sns"
upstream = "{upstream}"

[routes.verify]
scheme = "aws-sns"
topics = ["{TOPIC}"]
cert_hosts = ["localhost:{port}"]
cert_ca = "{ca}"
"#,
        db = dir.join("hookgate.db").display(),
        upstream = upstream.url("/orders"),
        port = sns.addr.port(),
        ca = pki.ca_path().display(),
    );
    with_admin(&text, true)
}

fn notification(sns: &Upstream, id: &str, topic: &str) -> Value {
    json!({
        "Type": "Notification",
        "MessageId": id,
        "TopicArn": topic,
        "Subject": "order placed",
        "Message": "{\"order\":\"ord_1\",\"amount\":4200}",
        "Timestamp": "2026-12-03T12:00:00.000Z",
        "SigningCertURL": format!("https://localhost:{}/cert.pem", sns.addr.port()),
        "UnsubscribeURL": "https://localhost/?Action=Unsubscribe",
    })
}

fn post(url: &str, message: &Value) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "text/plain; charset=UTF-8")
        .header("x-amz-sns-message-type", message["Type"].as_str().unwrap())
        .header(
            "x-amz-sns-message-id",
            message["MessageId"].as_str().unwrap(),
        )
        .body(Full::new(Bytes::from(message.to_string())))
        .unwrap()
}

/// How many times SNS's server was asked for `path`.
fn fetched(sns: &Upstream, path: &str) -> usize {
    (sns.seen().iter())
        .filter(|seen| seen.uri.split('?').next() == Some(path))
        .count()
}

#[tokio::test]
async fn sns_notifications_are_verified_with_the_fetched_certificate_and_forwarded_once() {
    let (dir, pki, signer) = (tempfile::tempdir().unwrap(), Pki::new("sns"), Signer::new());
    let sns = sns(&pki, signer.cert()).await;
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&config(&upstream, &sns, &pki, dir.path())).await;
    let url = Arc::new(gateway.url("/sns"));

    let first = signer.sign(notification(&sns, "msg-1", TOPIC), "2");
    let copies = (0..8).map(|_| {
        let (url, first) = (Arc::clone(&url), first.clone());
        tokio::spawn(async move { Sender::new().send(post(&url, &first)).await })
    });
    let answers = futures_util::future::join_all(copies).await;
    let mut bodies = Vec::new();
    for answer in answers {
        let answer = answer.unwrap();
        // A copy that came while the first was being forwarded is told to
        // retry; every other copy gets the upstream's answer.
        if answer.status != StatusCode::CONFLICT {
            assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
            bodies.push(answer.body);
        }
    }
    assert!(!bodies.is_empty());
    assert!(bodies.iter().all(|body| body == &bodies[0]), "replayed");
    let retry = Sender::new().send(post(&url, &first)).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.body, bodies[0], "a retry is answered from the record");
    assert_eq!(upstream.total(), 1, "forwarded once");
    assert_eq!(upstream.seen()[0].body, first.to_string().as_bytes());

    // SignatureVersion 1 (SHA-1) verifies too; the certificate is kept.
    let second = signer.sign(notification(&sns, "msg-2", TOPIC), "1");
    let answer = Sender::new().send(post(&url, &second)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(upstream.total(), 2);
    assert_eq!(fetched(&sns, "/cert.pem"), 1, "fetched once, then kept");

    // A message changed after signing.
    let mut tampered = signer.sign(notification(&sns, "msg-3", TOPIC), "2");
    tampered["Message"] = json!("{\"order\":\"ord_1\",\"amount\":1}");
    let answer = Sender::new().send(post(&url, &tampered)).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.code(), "signature_invalid");

    // Signed by SNS, but for a topic this route does not take.
    let other = "arn:aws:sns:us-east-1:999999999999:someone-elses";
    let foreign = signer.sign(notification(&sns, "msg-4", other), "2");
    let answer = Sender::new().send(post(&url, &foreign)).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.code(), "source_not_allowed");

    // A certificate named on a host outside the allowlist (the same
    // server, by address) is never fetched.
    let mut elsewhere = notification(&sns, "msg-5", TOPIC);
    elsewhere["SigningCertURL"] = json!(format!("https://127.0.0.1:{}/cert.pem", sns.addr.port()));
    let answer = Sender::new()
        .send(post(&url, &signer.sign(elsewhere, "2")))
        .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.code(), "signature_invalid");
    assert_eq!(
        fetched(&sns, "/cert.pem"),
        1,
        "nothing fetched from elsewhere"
    );

    // A certificate that cannot be fetched: 503, so SNS retries later.
    let mut down = notification(&sns, "msg-6", TOPIC);
    down["SigningCertURL"] = json!(format!("https://localhost:{}/down.pem", sns.addr.port()));
    let down = signer.sign(down, "2");
    for _ in 0..3 {
        let answer = Sender::new().send(post(&url, &down)).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.code(), "sender_unreachable");
        assert!(answer.headers.contains_key("retry-after"));
    }
    assert_eq!(
        fetched(&sns, "/down.pem"),
        1,
        "a failed fetch is not repeated at once"
    );

    // A certificate URL on the right host that is not a `.pem` document.
    let mut odd = notification(&sns, "msg-7", TOPIC);
    odd["SigningCertURL"] = json!(format!("https://localhost:{}/cert.txt", sns.addr.port()));
    let answer = Sender::new().send(post(&url, &signer.sign(odd, "2"))).await;
    assert_eq!(answer.code(), "signature_invalid");

    assert_eq!(upstream.total(), 2, "nothing refused reached the upstream");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    for (outcome, count) in [
        ("signature_invalid", 3.0),
        ("source_not_allowed", 1.0),
        ("sender_unreachable", 3.0),
    ] {
        let labels = [("route", "sns"), ("outcome", outcome)];
        assert_eq!(
            sample(&metrics, "hookgate_requests_total", &labels),
            Some(count),
            "{outcome}"
        );
    }
}

#[tokio::test]
async fn an_sns_subscription_is_confirmed_by_the_gateway_and_never_forwarded() {
    let (dir, pki, signer) = (tempfile::tempdir().unwrap(), Pki::new("sns"), Signer::new());
    let sns = sns(&pki, signer.cert()).await;
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&config(&upstream, &sns, &pki, dir.path())).await;
    let port = sns.addr.port();
    let confirmation = |topic: &str| {
        let mut message = notification(&sns, "msg-sub", topic);
        message["Type"] = json!("SubscriptionConfirmation");
        message["Token"] = json!("2336412f37fb687f5d51e6e2425c464d");
        message["Message"] = json!("You have chosen to subscribe to the topic.");
        message["SubscribeURL"] = json!(format!(
            "https://localhost:{port}/?Action=ConfirmSubscription&TopicArn={topic}&Token=2336412f"
        ));
        signer.sign(message, "2")
    };

    // From a topic the route does not take: not confirmed.
    let foreign = confirmation("arn:aws:sns:us-east-1:999999999999:someone-elses");
    let answer = Sender::new()
        .send(post(&gateway.url("/sns"), &foreign))
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(fetched(&sns, "/"), 0, "never confirmed");

    let answer = Sender::new()
        .send(post(&gateway.url("/sns"), &confirmation(TOPIC)))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(
        fetched(&sns, "/"),
        1,
        "the gateway confirmed the subscription"
    );
    assert_eq!(upstream.total(), 0, "a confirmation is never forwarded");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let labels = [("route", "sns"), ("outcome", "handshake")];
    assert_eq!(
        sample(&metrics, "hookgate_requests_total", &labels),
        Some(1.0)
    );
}
