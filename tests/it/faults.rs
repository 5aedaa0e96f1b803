//! Faults: an upstream that is down or slow, a store that dies and comes
//! back, and a gateway that shuts down mid-delivery.

use std::time::Duration;

use http::StatusCode;

use crate::support::*;

async fn assert_released(gateway: &TestGateway, key: &str) {
    let record = gateway.record("hook", key).await.unwrap();
    assert_eq!(record.state.as_str(), "failed", "{record:?}");
    assert!(record.lease_expires_at_ms.is_none(), "released: {record:?}");
}

#[tokio::test]
async fn an_unreachable_upstream_is_502_and_releases_the_claim() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let closed = format!("http://127.0.0.1:{}/gone", free_port());
    let text = config_text(&closed, &Backend::Redis(redis.url()), "", "");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    for _ in 0..2 {
        // Released each time, so the retry is forwarded (502 again, not 409).
        let answer = sender
            .deliver(&gateway.url("/hook"), &event("evt_down"))
            .await;
        assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
        assert_eq!(answer.code(), "upstream_unreachable");
        assert_released(&gateway, "evt_down").await;
    }
    let record = gateway.record("hook", "evt_down").await.unwrap();
    assert_eq!(record.attempts, 2);
    gateway.shutdown().await;
}

/// With `on_unknown = "release"`, a timeout releases the claim at once (the
/// default, "hold", is in hostile.rs).
#[tokio::test]
async fn a_timed_out_upstream_is_504_and_on_unknown_release_releases_the_claim() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        delay: if seen.nth == 1 {
            Duration::from_secs(3)
        } else {
            Duration::ZERO
        },
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", "").replace(
        "upstream_timeout = \"5s\"",
        "upstream_timeout = \"500ms\"\non_unknown = \"release\"",
    );
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let answer = sender
        .deliver(&gateway.url("/hook"), &event("evt_slow"))
        .await;
    assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(answer.code(), "upstream_timeout");
    assert_released(&gateway, "evt_slow").await;
    let retry = sender
        .deliver(&gateway.url("/hook"), &event("evt_slow"))
        .await;
    assert_eq!(
        retry.status,
        StatusCode::OK,
        "the retry is forwarded at once"
    );
    assert_eq!(upstream.count("evt_slow"), 2);
    gateway.shutdown().await;
}

/// Redis dies: 503 + Retry-After and nothing forwarded. Redis returns: traffic
/// flows again without restarting hookgate.
#[tokio::test]
async fn a_dead_store_rejects_then_recovers() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&config_text(
        &upstream.url("/"),
        &Backend::Redis(redis.url()),
        "",
        "",
    ))
    .await;
    let sender = Sender::new();
    assert_eq!(
        sender
            .deliver(&gateway.url("/hook"), &event("evt_before"))
            .await
            .status,
        StatusCode::OK
    );

    redis.kill();
    for i in 0..5 {
        let answer = sender
            .deliver(&gateway.url("/hook"), &event(&format!("evt_during_{i}")))
            .await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
        assert_eq!(answer.code(), "store_unavailable");
        assert!(answer.headers.get("retry-after").is_some());
    }
    assert_eq!(
        upstream.total(),
        1,
        "nothing forwarded while the store is down"
    );

    redis.restart().await;
    let mut recovered = None;
    for _ in 0..100 {
        let answer = sender
            .deliver(&gateway.url("/hook"), &event("evt_after"))
            .await;
        if answer.status == StatusCode::OK {
            recovered = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        recovered.is_some(),
        "traffic flows again after Redis returns"
    );
    assert_eq!(upstream.count("evt_after"), 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn on_error_forward_prefers_availability() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/"),
        &Backend::Redis(redis.url()),
        "",
        "on_error = \"forward\"",
    );
    let gateway = TestGateway::start(&text).await;
    redis.kill();
    let sender = Sender::new();
    for _ in 0..2 {
        let answer = sender
            .deliver(&gateway.url("/hook"), &event("evt_avail"))
            .await;
        assert_eq!(answer.status, StatusCode::OK);
        assert!(!answer.replayed());
    }
    assert_eq!(
        upstream.count("evt_avail"),
        2,
        "no dedup without a store, as configured"
    );
    gateway.shutdown().await;
}

/// SIGTERM semantics: a delivery in flight when shutdown starts still
/// finishes and its response is recorded.
#[tokio::test]
async fn shutdown_finishes_and_records_in_flight_deliveries() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(600),
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", "");
    let gateway = TestGateway::start(&text).await;
    let store = std::sync::Arc::clone(&gateway.store);
    let url = gateway.url("/hook");
    let delivery =
        tokio::spawn(async move { Sender::new().deliver(&url, &event("evt_drain")).await });
    assert!(eventually(Duration::from_secs(2), || ready(upstream.total() == 1)).await);
    gateway.shutdown().await;

    assert_eq!(delivery.await.unwrap().status, StatusCode::OK);
    let record = store
        .records()
        .get(&store.key("hook", "evt_drain"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state.as_str(), "completed");
}

/// A delivery still running when the grace period ends has its claim
/// released, so the sender's retry is processed at once.
#[tokio::test]
async fn shutdown_releases_claims_left_after_the_grace_period() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_secs(30),
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", "")
        .replace("shutdown_grace = \"2s\"", "shutdown_grace = \"300ms\"");
    let gateway = TestGateway::start(&text).await;
    let handle = std::sync::Arc::clone(&gateway.store);
    let url = gateway.url("/hook");
    tokio::spawn(async move { Sender::new().deliver(&url, &event("evt_stuck")).await });
    assert!(eventually(Duration::from_secs(2), || ready(upstream.total() == 1)).await);
    gateway.shutdown().await;
    let store = handle;
    let record = store
        .records()
        .get(&store.key("hook", "evt_stuck"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state.as_str(), "failed");
    assert!(record.token.is_none(), "released");
}

/// A client that never finishes its request head is cut off (slowloris).
#[tokio::test]
async fn a_slow_header_sender_is_disconnected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "").replace(
        "shutdown_grace",
        "header_read_timeout = \"300ms\"\nshutdown_grace",
    );
    let gateway = TestGateway::start(&text).await;
    let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    stream
        .write_all(b"POST /hook HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the connection was closed by the gateway");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(upstream.total(), 0);
    gateway.shutdown().await;
}

/// With `max_connections = 2`, a third connection waits until one closes.
#[tokio::test]
async fn connections_beyond_the_limit_wait_their_turn() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "")
        .replace("shutdown_grace", "max_connections = 2\nshutdown_grace");
    let gateway = TestGateway::start(&text).await;
    let request = |id: &str| {
        let body = event(id);
        format!(
            "POST /hook HTTP/1.1\r\nHost: x\r\nX-Signature: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            sign(body.as_bytes()),
            body.len()
        )
    };
    let first = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let second = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    third
        .write_all(request("evt_third").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        upstream.total(),
        0,
        "the third connection is not served while two are open"
    );

    drop(first);
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), third.read_to_string(&mut answer))
        .await
        .expect("served once a slot frees up")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(upstream.count("evt_third"), 1);
    drop(second);
    gateway.shutdown().await;
}

/// `redis://user:password@host` authenticates as an ACL user; wrong
/// credentials are a store failure (503), not a silent bypass.
#[tokio::test]
async fn redis_acl_credentials_are_used() {
    let acl = [
        "--user", "default", "off", "--user", "hookgate", "on", ">s3cret", "~*", "+@all",
    ];
    let Some(redis) =
        RedisServer::start_with(&acl, Some("redis://hookgate:s3cret@127.0.0.1:{port}/0")).await
    else {
        return;
    };
    let upstream = Upstream::start().await;
    let good = format!("redis://hookgate:s3cret@127.0.0.1:{}/0", redis.port);
    let gateway = TestGateway::start(&config_text(
        &upstream.url("/"),
        &Backend::Redis(good),
        "",
        "",
    ))
    .await;
    assert_eq!(
        Sender::new()
            .deliver(&gateway.url("/hook"), &event("evt_acl"))
            .await
            .status,
        StatusCode::OK
    );
    gateway.shutdown().await;

    let bad = format!("redis://hookgate:wrong@127.0.0.1:{}/0", redis.port);
    let gateway = TestGateway::start(&config_text(
        &upstream.url("/"),
        &Backend::Redis(bad),
        "",
        "",
    ))
    .await;
    let answer = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_acl_bad"))
        .await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(upstream.count("evt_acl_bad"), 0);
    gateway.shutdown().await;
}

/// `rediss://` to a Redis with a private CA: trusted through `store.tls_ca`,
/// refused (503, nothing forwarded) without it.
#[tokio::test]
async fn rediss_is_verified_against_store_tls_ca() {
    let pki = Pki::new("redis");
    let (cert, key) = pki.leaf("redis");
    let (cert, key, ca) = (
        cert.display().to_string(),
        key.display().to_string(),
        pki.ca_path().display().to_string(),
    );
    let args = [
        "--port",
        "0",
        "--tls-port",
        "{port}",
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ];
    let Some(redis) = RedisServer::start_with(&args, Some("tcp")).await else {
        return;
    };
    let upstream = Upstream::start().await;
    let url = format!("rediss://localhost:{}/0", redis.port);

    let trusted = config_text(
        &upstream.url("/"),
        &Backend::Redis(url.clone()),
        "",
        &format!("tls_ca = \"{ca}\""),
    );
    let gateway = TestGateway::start(&trusted).await;
    assert_eq!(
        Sender::new()
            .deliver(&gateway.url("/hook"), &event("evt_tls_store"))
            .await
            .status,
        StatusCode::OK
    );
    gateway.shutdown().await;

    let untrusted = config_text(&upstream.url("/"), &Backend::Redis(url), "", "");
    let gateway = TestGateway::start(&untrusted).await;
    let answer = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_tls_store_2"))
        .await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(upstream.count("evt_tls_store_2"), 0);
    gateway.shutdown().await;
}

/// A store that answers but refuses writes (Redis at `maxmemory` under
/// `noeviction`): an acceptance is answered 503 and nothing is lost, the
/// gateway stays ready (readiness is local), and `/readyz`, the routes
/// view and `hookgate_store_refusing` name the operation and Redis's own
/// error — until Redis takes writes again, when they clear and the
/// sender's retry is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_refuses_writes_says_which_and_why() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let backend = Backend::Redis(redis.url());
    let text = config_text(&upstream.url("/"), &backend, "delivery = \"async\"", "");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let set = |limit: &'static str| {
        ::redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(limit)
            .clone()
    };
    let _: () = set("1").query_async(&mut connection).await.unwrap();

    let url = gateway.url("/hook");
    let refused = Sender::new().deliver(&url, &event("evt_oom")).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    let ready = request(http::Method::GET, &gateway.admin_url("/readyz"), None).await;
    assert_eq!(ready.status, StatusCode::OK, "ready: readiness is local");
    let refusing = ready.json()["store_refusing"].clone();
    assert_eq!(refusing[0]["op"], "claim", "{refusing}");
    assert!(
        refusing[0]["error"].as_str().unwrap().contains("OOM"),
        "{refusing}"
    );
    assert_eq!(refusing[0]["scope"], "hook", "{refusing}");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(
        sample(&metrics, "hookgate_store_refusing", &[("op", "claim")]),
        Some(1.0)
    );
    let routes = request(
        http::Method::GET,
        &gateway.admin_url("/admin/routes"),
        Some(ADMIN_TOKEN),
    )
    .await;
    let route = &routes.json()["routes"][0];
    assert_eq!(route["store_refusing"][0]["op"], "claim", "{route}");

    let _: () = set("0").query_async(&mut connection).await.unwrap();
    let delivered = Sender::new()
        .deliver_until_settled(&url, &event("evt_oom"))
        .await;
    assert_eq!(delivered.status, StatusCode::ACCEPTED);
    assert!(
        upstream
            .all_reached(&["evt_oom".into()], Duration::from_secs(10))
            .await
    );
    let ready = request(http::Method::GET, &gateway.admin_url("/readyz"), None).await;
    assert_eq!(ready.json()["store_refusing"], serde_json::json!([]));
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(
        sample(&metrics, "hookgate_store_refusing", &[("op", "claim")]),
        Some(0.0)
    );
    assert_eq!(upstream.count("evt_oom"), 1);
    gateway.shutdown().await;
}
