//! Senders and operators: re-keyed bodies, crafted guard names, forged
//! `X-Forwarded-For`, and a forget while the call still runs.

use std::time::Duration;

use http::StatusCode;

use super::route_config;
use crate::support::*;

const ADMIN_TOKEN: &str = "hostile-admin-token-0123";

fn with_admin(text: &str) -> String {
    text.replace(
        "[store]",
        &format!("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{ADMIN_TOKEN}\"\n\n[store]"),
    )
}

async fn admin_delete(sender: &Sender, url: &str) -> Answer {
    let request = http::Request::delete(url)
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    sender.send(request).await
}

/// Forgetting a key whose delivery is still calling the upstream would let a
/// duplicate through beside it: the admin API refuses (409 `in_flight`)
/// unless `?force=true`.
#[tokio::test]
async fn a_delete_during_a_running_call_is_refused_unless_forced() {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(1500),
        ..ok_plan(seen)
    })
    .await;
    let gateway = TestGateway::start(&with_admin(&route_config(&upstream.url("/"), ""))).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    let running = {
        let (sender, url) = (sender.clone(), url.clone());
        tokio::spawn(async move { sender.deliver(&url, &event("evt_del")).await })
    };
    assert!(eventually(Duration::from_secs(2), || ready(upstream.total() == 1)).await);

    let key_url = gateway.admin_url("/admin/routes/hook/keys/evt_del");
    let refused = admin_delete(&sender, &key_url).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.code(), "in_flight");
    let duplicate = sender.deliver(&url, &event("evt_del")).await;
    assert_eq!(duplicate.code(), "in_flight", "the claim is intact");
    assert_eq!(upstream.count("evt_del"), 1);

    let forced = admin_delete(&sender, &format!("{key_url}?force=true")).await;
    assert_eq!(forced.status, StatusCode::OK);
    assert!(gateway.record("hook", "evt_del").await.is_none());
    assert_eq!(running.await.unwrap().status, StatusCode::OK);
    gateway.shutdown().await;
}

const GITHUB_SECRET: &str = "github-secret-0123456789";

/// A GitHub route (replay guard on by default) on `backend`.
fn github_route(upstream: &str, backend: &Backend) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\n{}\nkey_prefix = \"h{}:\"\n\
         [[routes]]\nname = \"gh\"\npath = \"/gh\"\nupstream = \"{upstream}\"\n\
         [routes.verify]\nscheme = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n",
        backend.toml(),
        rand::random::<u32>(),
    )
}

/// A correctly signed GitHub delivery of `body` under delivery id `id`.
fn github_delivery(
    url: &str,
    id: &str,
    body: &str,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(GITHUB_SECRET.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-github-delivery", id)
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
        )
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .unwrap()
}

/// A delivery id crafted to look like a replay guard's name
/// (`body-sha256:<hex>`) is an ordinary key: guards have their own
/// namespace, so it neither collides (WRONGTYPE, 503) nor blocks the body.
#[tokio::test]
async fn a_delivery_id_shaped_like_a_guard_key_is_just_a_key() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = github_route(&upstream.url("/"), &Backend::Redis(redis.url()));
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/gh");
    let first_body = r#"{"action":"opened","number":1}"#;
    let first = sender.send(github_delivery(&url, "d-1", first_body)).await;
    assert_eq!(first.status, StatusCode::OK);

    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        first_body.as_bytes(),
    ));
    let crafted_id = format!("body-sha256:{digest}");
    let other_body = r#"{"action":"closed","number":2}"#;
    let crafted = sender
        .send(github_delivery(&url, &crafted_id, other_body))
        .await;
    assert_eq!(crafted.status, StatusCode::OK, "{crafted:?}");
    assert!(!crafted.replayed());
    assert_eq!(upstream.total(), 2);
    assert_eq!(upstream.count(&crafted_id), 1);
    gateway.shutdown().await;
}

/// Delivery A of a body fails (500, released); the same body under a new id
/// B succeeds; A's retry is then a duplicate of B — the guard holds for every
/// later claim of the body, on every backend.
#[tokio::test]
async fn a_failed_delivery_retried_after_its_body_completed_under_another_id_is_a_duplicate() {
    let redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut backends = vec![
        Backend::Memory,
        Backend::Embedded(dir.path().join("hostile.db")),
    ];
    backends.extend(redis.as_ref().map(|redis| Backend::Redis(redis.url())));
    for backend in backends {
        let upstream = Upstream::with(|seen| Plan {
            status: if seen.key() == "A" {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::OK
            },
            ..ok_plan(seen)
        })
        .await;
        let gateway = TestGateway::start(&github_route(&upstream.url("/"), &backend)).await;
        let sender = Sender::new();
        let url = gateway.url("/gh");
        let body = r#"{"action":"created","charge":4200}"#;
        let a = sender.send(github_delivery(&url, "A", body)).await;
        assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
        let b = sender.send(github_delivery(&url, "B", body)).await;
        assert_eq!(b.status, StatusCode::OK);
        let retry = sender.send(github_delivery(&url, "A", body)).await;
        assert_eq!(retry.status, StatusCode::OK, "{}", backend.toml());
        assert!(retry.replayed(), "{}", backend.toml());
        assert_eq!(retry.body, b.body);
        assert_eq!(upstream.total(), 2, "{}", backend.toml());
        gateway.shutdown().await;
    }
}

/// A sender cannot forge where it comes from: its `X-Forwarded-For` chain is
/// kept only when the peer is one of `trusted_proxies`.
#[tokio::test]
async fn x_forwarded_for_is_kept_only_from_trusted_proxies() {
    let upstream = Upstream::start().await;
    let sender = Sender::new();
    for (trusted, expected) in [
        ("", "127.0.0.1"),
        ("trusted_proxies = [\"10.0.0.0/8\"]", "127.0.0.1"),
        (
            "trusted_proxies = [\"10.0.0.0/8\", \"127.0.0.1/32\"]",
            "198.51.100.7, 127.0.0.1",
        ),
    ] {
        let text = route_config(&upstream.url("/"), "").replace(
            "shutdown_grace = \"2s\"",
            &format!("shutdown_grace = \"2s\"\n{trusted}"),
        );
        let gateway = TestGateway::start(&text).await;
        let id = format!("evt_xff_{}", upstream.total());
        let mut request = signed(&gateway.url("/hook"), &event(&id));
        request
            .headers_mut()
            .insert("x-forwarded-for", "198.51.100.7".parse().unwrap());
        assert_eq!(sender.send(request).await.status, StatusCode::OK);
        let seen = upstream.seen().pop().unwrap();
        assert_eq!(seen.headers["x-forwarded-for"], expected, "{trusted}");
        gateway.shutdown().await;
    }
}

/// Nor through `X-Real-IP` or `Forwarded`: from an untrusted peer both are
/// dropped, from a trusted proxy both are kept.
#[tokio::test]
async fn x_real_ip_and_forwarded_are_kept_only_from_trusted_proxies() {
    let upstream = Upstream::start().await;
    let sender = Sender::new();
    for (trusted, kept) in [("", false), ("trusted_proxies = [\"127.0.0.1/32\"]", true)] {
        let text = route_config(&upstream.url("/"), "").replace(
            "shutdown_grace = \"2s\"",
            &format!("shutdown_grace = \"2s\"\n{trusted}"),
        );
        let gateway = TestGateway::start(&text).await;
        let id = format!("evt_real_ip_{}", upstream.total());
        let mut request = signed(&gateway.url("/hook"), &event(&id));
        let headers = request.headers_mut();
        headers.insert("x-real-ip", "198.51.100.7".parse().unwrap());
        headers.insert("forwarded", "for=198.51.100.7;proto=https".parse().unwrap());
        assert_eq!(sender.send(request).await.status, StatusCode::OK);
        let seen = upstream.seen().pop().unwrap();
        assert_eq!(seen.headers.contains_key("x-real-ip"), kept, "{trusted}");
        assert_eq!(seen.headers.contains_key("forwarded"), kept, "{trusted}");
        if kept {
            assert_eq!(seen.headers["x-real-ip"], "198.51.100.7");
        }
        gateway.shutdown().await;
    }
}

/// Nothing touches the store before the signature (docs/architecture.md):
/// forged, unsigned and oversized deliveries of a key are refused without
/// one store operation, and the key stays unclaimed — its genuine delivery
/// afterwards is the first, and is forwarded.
#[tokio::test]
async fn nothing_reaches_the_store_before_the_signature() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&with_admin(&route_config(&upstream.url("/"), ""))).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    let body = event("evt_forged_first");
    let forged = |signature: Option<&str>, body: String| {
        let mut request = http::Request::post(&url);
        if let Some(signature) = signature {
            request = request.header("x-signature", signature);
        }
        request
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap()
    };
    let wrong = format!("sha256={}", "0".repeat(64));
    let mut answers = Vec::new();
    for _ in 0..20 {
        answers.push(sender.send(forged(Some(&wrong), body.clone())).await);
        answers.push(sender.send(forged(None, body.clone())).await);
    }
    let oversized = format!(
        "{{\"id\":\"evt_forged_first\",\"pad\":\"{}\"}}",
        "x".repeat(8192)
    );
    answers.push(
        sender
            .send(forged(Some(&sign(oversized.as_bytes())), oversized))
            .await,
    );
    for answer in &answers {
        assert!(answer.status.is_client_error(), "{answer:?}");
    }
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    // The background's own operations (upkeep, workers, the scrape's
    // ping) go on; a delivery's are these.
    for op in ["claim", "get", "complete", "fail", "release", "renew"] {
        let count = sample(
            &metrics,
            "hookgate_store_operation_duration_seconds_count",
            &[("op", op)],
        );
        assert_eq!(
            count.unwrap_or(0.0),
            0.0,
            "{op} before a signature verified"
        );
    }

    let genuine = sender.deliver(&url, &body).await;
    assert_eq!(genuine.status, StatusCode::OK, "{:?}", genuine.json());
    assert!(!genuine.replayed());
    assert_eq!(upstream.count("evt_forged_first"), 1);
    gateway.shutdown().await;
}
