//! What an operator sees: `/metrics` after real traffic, readiness that
//! follows the store, the admin API, request ids.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;

use crate::support::*;

const TOKEN: &str = ADMIN_TOKEN;

/// An upstream that answers `key` after `delay`, everything else at once.
async fn slow_for(key: &'static str, delay: Duration) -> Upstream {
    Upstream::with(move |seen| Plan {
        delay: if seen.key() == key {
            delay
        } else {
            Duration::ZERO
        },
        ..ok_plan(seen)
    })
    .await
}

#[tokio::test]
async fn metrics_count_real_traffic_under_bounded_labels() {
    let upstream = slow_for("evt_slow_m", Duration::from_millis(500)).await;
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, "", ""),
        false,
    );
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");

    sender.deliver(&url, &event("evt_metrics_1")).await;
    sender.deliver(&url, &event("evt_metrics_1")).await;
    let slow = {
        let (sender, url) = (sender.clone(), url.clone());
        tokio::spawn(async move { sender.deliver(&url, &event("evt_slow_m")).await })
    };
    assert!(
        eventually(Duration::from_secs(2), || ready(
            upstream.count("evt_slow_m") == 1
        ))
        .await
    );
    assert_eq!(
        sender.deliver(&url, &event("evt_slow_m")).await.status,
        StatusCode::CONFLICT
    );
    slow.await.unwrap();
    let unsigned = Request::post(&url)
        .body(Full::new(Bytes::from(event("evt_forged"))))
        .unwrap();
    sender.send(unsigned).await;
    sender
        .deliver(&gateway.url("/nope/evt_secret_path"), &event("evt_lost"))
        .await;

    let metrics = get(&gateway.admin_url("/metrics"), None).await;
    assert_eq!(metrics.status, StatusCode::OK);
    let body = String::from_utf8(metrics.body.to_vec()).unwrap();
    let requests = |route, outcome| {
        sample(
            &body,
            "hookgate_requests_total",
            &[("route", route), ("outcome", outcome)],
        )
    };
    assert_eq!(requests("hook", "forwarded"), Some(2.0), "{body}");
    assert_eq!(requests("hook", "replayed"), Some(1.0));
    assert_eq!(requests("hook", "in_flight"), Some(1.0));
    assert_eq!(requests("hook", "signature_invalid"), Some(1.0));
    assert_eq!(requests("_unmatched", "route_not_found"), Some(1.0));
    assert_eq!(
        sample(
            &body,
            "hookgate_request_duration_seconds_count",
            &[("route", "hook"), ("outcome", "replayed")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &body,
            "hookgate_upstream_duration_seconds_count",
            &[("route", "hook")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &body,
            "hookgate_upstream_responses_total",
            &[("route", "hook"), ("class", "2xx")]
        ),
        Some(2.0)
    );
    assert!(
        sample(
            &body,
            "hookgate_store_operation_duration_seconds_count",
            &[("op", "claim")]
        )
        .unwrap()
            >= 3.0
    );
    assert!(
        sample(
            &body,
            "hookgate_store_operation_duration_seconds_count",
            &[("op", "complete")]
        )
        .unwrap()
            >= 2.0
    );
    assert_eq!(
        sample(&body, "hookgate_in_flight_requests", &[("route", "hook")]),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &body,
            "hookgate_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &body,
            "hookgate_config_reloads_total",
            &[("result", "failure")]
        ),
        Some(0.0)
    );
    for unbounded in [
        "evt_metrics_1",
        "evt_slow_m",
        "evt_secret_path",
        "/nope",
        "/hook",
    ] {
        assert!(!body.contains(unbounded), "{unbounded} leaked into a label");
    }
    assert_eq!(
        get(&gateway.admin_url("/healthz"), None).await.status,
        StatusCode::OK
    );
    gateway.shutdown().await;
}

/// A gateway with an admin listener (no token) on `redis`.
async fn on_redis(redis: &RedisServer) -> TestGateway {
    let text = with_admin(
        &config_text("http://127.0.0.1:9/", &Backend::Redis(redis.url()), "", ""),
        false,
    );
    TestGateway::start(&text).await
}

/// Readiness is local: a lost shared store leaves the instance ready (every
/// replica would otherwise leave the load balancer at once), the body and
/// `hookgate_store_up` say how the store is.
#[tokio::test]
async fn readiness_stays_local_and_the_store_shows_in_its_body() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let gateway = on_redis(&redis).await;
    let ready = gateway.admin_url("/readyz");
    let answer = get(&ready, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.json()["status"], "ready");
    // The test Redis runs without persistence; retention here is 7 days.
    let warnings = answer.json()["warnings"].to_string();
    assert!(warnings.contains("persistence is off"), "{warnings}");

    assert_eq!(answer.json()["store"], "ok");
    assert_eq!(answer.json()["store_shared"], true);

    redis.kill();
    let answer = get(&ready, None).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.json()["status"], "ready");
    assert_ne!(answer.json()["store"], "ok", "{answer:?}");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(sample(&metrics, "hookgate_store_up", &[]), Some(0.0));

    redis.restart().await;
    let back = eventually(Duration::from_secs(5), || async {
        get(&ready, None).await.json()["store"] == "ok"
    });
    assert!(back.await, "the body says ok again once Redis returns");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(sample(&metrics, "hookgate_store_up", &[]), Some(1.0));
    gateway.shutdown().await;
}

/// The embedded store is the instance's own: its readiness probe is a
/// write, committed to the file, so a file that cannot take one is unready.
#[tokio::test]
async fn readiness_writes_to_the_embedded_file() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ready.db");
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Embedded(path.clone()), "", ""),
        false,
    );
    let gateway = TestGateway::start(&text).await;
    let answer = get(&gateway.admin_url("/readyz"), None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["store_shared"], false);
    let probed: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT at FROM readiness_probe WHERE id = 1", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert!(probed > 1_600_000_000_000, "a Unix ms time: {probed}");
    let on_disk = std::fs::metadata(&path).unwrap().len() as f64;
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let bytes = sample(&metrics, "hookgate_store_bytes", &[]).unwrap();
    assert!(
        bytes >= on_disk,
        "the file and its log: {bytes} against {on_disk}"
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn the_admin_api_shows_forgets_and_releases_keys() {
    let upstream = Upstream::with(|seen| Plan {
        delay: if seen.key() == "evt_stuck" {
            Duration::from_secs(30)
        } else {
            Duration::ZERO
        },
        ..ok_plan(seen)
    })
    .await;
    let route = "processing_ttl = \"600ms\"\nretention = \"1h\"";
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, route, ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    let key_url = gateway.admin_url("/admin/routes/hook/keys/evt_admin");

    assert_eq!(
        sender.deliver(&url, &event("evt_admin")).await.status,
        StatusCode::OK
    );
    assert_eq!(get(&key_url, None).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        get(&key_url, Some("admin-token-wrong-000000")).await.status,
        StatusCode::UNAUTHORIZED
    );

    let record = get(&key_url, Some(TOKEN)).await;
    assert_eq!(record.status, StatusCode::OK, "{record:?}");
    let json = record.json();
    assert_eq!(json["state"], "completed");
    assert_eq!(json["attempts"], 1);
    assert_eq!(json["response_status"], 200);
    assert!(json["first_seen"].as_u64().unwrap() <= json["completed_at"].as_u64().unwrap());
    assert_eq!(
        get(
            &gateway.admin_url("/admin/routes/hook/keys/nope"),
            Some(TOKEN)
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(
            &gateway.admin_url("/admin/routes/other/keys/evt_admin"),
            Some(TOKEN)
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );

    // "Please reprocess this event": forget it, and the next delivery goes through.
    assert_eq!(
        request(http::Method::DELETE, &key_url, Some(TOKEN))
            .await
            .status,
        StatusCode::OK
    );
    let again = sender.deliver(&url, &event("evt_admin")).await;
    assert!(!again.replayed());
    assert_eq!(upstream.count("evt_admin"), 2);

    // A stuck claim can be released by hand.
    let stuck = {
        let (sender, url) = (sender.clone(), url.clone());
        tokio::spawn(async move { sender.deliver(&url, &event("evt_stuck")).await })
    };
    assert!(
        eventually(Duration::from_secs(2), || ready(
            upstream.count("evt_stuck") == 1
        ))
        .await
    );
    assert_eq!(
        sender.deliver(&url, &event("evt_stuck")).await.status,
        StatusCode::CONFLICT
    );
    let release_url = gateway.admin_url("/admin/routes/hook/keys/evt_stuck/release");
    assert_eq!(
        request(http::Method::POST, &release_url, Some(TOKEN))
            .await
            .status,
        StatusCode::OK
    );
    let redelivery = {
        let (sender, url) = (sender.clone(), url.clone());
        tokio::spawn(async move { sender.deliver(&url, &event("evt_stuck")).await })
    };
    assert!(
        eventually(Duration::from_secs(2), || ready(
            upstream.count("evt_stuck") == 2
        ))
        .await,
        "forwarded after release"
    );
    // The first holder's next renewal finds its claim taken over.
    let lost = || async {
        let body = scrape(&gateway.admin_url("/metrics")).await;
        sample(&body, "hookgate_leases_lost_total", &[("route", "hook")])
    };
    let counted = eventually(Duration::from_secs(3), || async {
        lost().await.is_some_and(|lost| lost > 0.0)
    });
    assert!(counted.await);
    assert_eq!(lost().await, Some(1.0));
    stuck.abort();
    redelivery.abort();

    // Never on the public listener.
    let public = get(
        &gateway.url("/admin/routes/hook/keys/evt_admin"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(public.code(), "route_not_found");
    assert_eq!(
        get(&gateway.url("/metrics"), None).await.status,
        StatusCode::NOT_FOUND
    );
    drop(gateway);
}

#[tokio::test]
async fn without_a_token_the_admin_api_is_off() {
    let upstream = Upstream::start().await;
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, "", ""),
        false,
    );
    let gateway = TestGateway::start(&text).await;
    let answer = get(&gateway.admin_url("/admin/routes/hook/keys/x"), Some(TOKEN)).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    gateway.shutdown().await;
}

#[tokio::test]
async fn request_ids_travel_upstream_and_back() {
    let upstream = Upstream::start().await;
    let gateway =
        TestGateway::start(&config_text(&upstream.url("/"), &Backend::Memory, "", "")).await;
    let sender = Sender::new();
    let answer = sender
        .deliver(&gateway.url("/hook"), &event("evt_rid_1"))
        .await;
    let generated = answer.headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(generated.len(), 32);
    assert_eq!(
        upstream.seen()[0].headers["x-request-id"],
        generated.as_str()
    );

    let mut given = signed(&gateway.url("/hook"), &event("evt_rid_2"));
    given
        .headers_mut()
        .insert("x-request-id", "sender-trace-42".parse().unwrap());
    let answer = sender.send(given).await;
    assert_eq!(answer.headers["x-request-id"], "sender-trace-42");
    assert_eq!(
        upstream.seen()[1].headers["x-request-id"],
        "sender-trace-42"
    );
    gateway.shutdown().await;
}

/// The signals an operator alerts on exist before any traffic (a route's
/// series at 0, the process, the store, the config), and every upstream
/// attempt is timed and classed — a timeout and an unreachable upstream
/// included, not only answers.
#[tokio::test]
async fn every_signal_is_there_from_the_start_and_every_attempt_is_counted() {
    let upstream = slow_for("evt_hang", Duration::from_secs(3)).await;
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, "", ""),
        false,
    )
    .replace("upstream_timeout = \"5s\"", "upstream_timeout = \"300ms\"")
    .replace(
        "timeout = \"300ms\"\nkey_prefix",
        "timeout = \"250ms\"\nkey_prefix",
    ) + &format!(
        "\n[[routes]]\nname = \"down\"\npath = \"/down\"\nupstream = \"http://127.0.0.1:{}/\"\n\
             key = [\"json:/id\"]\n[routes.verify]\nscheme = \"none\"\n",
        free_port()
    );
    let gateway = TestGateway::start(&text).await;
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    for outcome in [
        "forwarded",
        "signature_invalid",
        "store_unavailable",
        "route_paused",
    ] {
        assert_eq!(
            sample(
                &metrics,
                "hookgate_requests_total",
                &[("route", "down"), ("outcome", outcome)]
            ),
            Some(0.0),
            "{outcome} at 0 before any request"
        );
    }
    assert_eq!(sample(&metrics, "hookgate_store_up", &[]), Some(1.0));
    assert_eq!(
        sample(&metrics, "hookgate_store_timeout_seconds", &[]),
        Some(0.25)
    );
    assert_eq!(
        sample(&metrics, "hookgate_config_last_reload_successful", &[]),
        Some(1.0)
    );
    assert!(sample(&metrics, "process_resident_memory_bytes", &[]).unwrap() > 0.0);
    assert!(sample(&metrics, "process_open_fds", &[]).unwrap() > 0.0);

    let sender = Sender::new();
    assert_eq!(
        sender
            .deliver(&gateway.url("/hook"), &event("evt_hang"))
            .await
            .code(),
        "upstream_timeout"
    );
    assert_eq!(
        sender
            .deliver(&gateway.url("/down"), &event("evt_down"))
            .await
            .code(),
        "upstream_unreachable"
    );
    sender
        .deliver(&gateway.url("/hook"), &event("evt_fine"))
        .await;
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let class = |route: &str, class: &str| {
        sample(
            &metrics,
            "hookgate_upstream_responses_total",
            &[("route", route), ("class", class)],
        )
    };
    assert_eq!(class("hook", "timeout"), Some(1.0));
    assert_eq!(class("hook", "2xx"), Some(1.0));
    assert_eq!(class("down", "unreachable"), Some(1.0));
    assert_eq!(class("down", "5xx"), Some(0.0));
    let timed = |route: &str| {
        sample(
            &metrics,
            "hookgate_upstream_duration_seconds_count",
            &[("route", route)],
        )
    };
    assert_eq!(timed("hook"), Some(2.0), "the timed-out call is timed too");
    assert_eq!(timed("down"), Some(1.0));
    let slow = sample(
        &metrics,
        "hookgate_upstream_duration_seconds_sum",
        &[("route", "hook")],
    )
    .unwrap();
    assert!(slow >= 0.3, "the timeout's 300 ms are in the sum: {slow}");
    gateway.shutdown().await;
}

/// A Redis that may evict (any `maxmemory-policy` but `noeviction`) could
/// silently drop a claim: readiness says so (docs/operations/README.md, Redis
/// settings that must hold).
#[tokio::test]
async fn readiness_warns_of_a_redis_that_may_evict() {
    let Some(redis) = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"], None).await
    else {
        return;
    };
    let gateway = on_redis(&redis).await;
    let answer = get(&gateway.admin_url("/readyz"), None).await;
    assert_eq!(answer.status, StatusCode::OK);
    let warnings = answer.json()["warnings"].to_string();
    assert!(
        warnings.contains("allkeys-lru") && warnings.contains("noeviction"),
        "{warnings}"
    );
    gateway.shutdown().await;
}
