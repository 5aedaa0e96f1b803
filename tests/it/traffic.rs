//! Traffic control (docs/guide/traffic-control.md, "Traffic control") through running gateways: senders admitted by
//! address before anything of their request is read; routes paused and
//! resumed for a whole fleet and across restarts; a circuit breaker that
//! stops calling a failing upstream; an upstream rate limit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;

use crate::support::*;

/// The most calls `upstream` saw within any one second.
fn busiest_second(upstream: &Upstream) -> usize {
    let mut times: Vec<Instant> = upstream.seen().iter().map(|seen| seen.at).collect();
    times.sort();
    (0..times.len())
        .map(|i| {
            let end = times[i] + Duration::from_secs(1);
            times[i..].iter().take_while(|at| **at < end).count()
        })
        .max()
        .unwrap_or(0)
}

/// An upstream that answers 503 while `failing` is set, 200 otherwise.
async fn flaky(failing: &Arc<AtomicBool>) -> Upstream {
    let failing = Arc::clone(failing);
    Upstream::with(move |seen| Plan {
        status: if failing.load(Ordering::SeqCst) {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        },
        ..ok_plan(seen)
    })
    .await
}

/// `hookgate routes …` against the admin API at `admin`; its stdout.
fn routes_cli(admin: &str, args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("routes")
        .args(args)
        .env("HOOKGATE_ADMIN_URL", admin)
        .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("USER", "ops-alice")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "hookgate routes {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A signed delivery of `id` with `X-Forwarded-For: chain`.
fn forwarded(url: &str, id: &str, chain: &str) -> Request<Full<Bytes>> {
    let mut request = signed(url, &event(id));
    request
        .headers_mut()
        .insert("x-forwarded-for", chain.parse().unwrap());
    request
}

#[tokio::test]
async fn allow_from_refuses_other_addresses_before_reading_the_body() {
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "allow_from = [\"10.0.0.0/8\", \"2001:db8::/32\"]",
        "",
    );
    let gateway = TestGateway::start(&with_admin(&text, false)).await;
    let url = gateway.url("/hook");
    let refused = Sender::new().deliver(&url, &event("evt_outside")).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "source_not_allowed");
    // A body over max_body_bytes is refused for its address, not its size:
    // nothing of it was read.
    let huge = Request::post(&url)
        .body(Full::new(Bytes::from(vec![b'x'; 64 * 1024])))
        .unwrap();
    assert_eq!(Sender::new().send(huge).await.code(), "source_not_allowed");
    assert_eq!(upstream.total(), 0);
    assert!(
        gateway.record("hook", "evt_outside").await.is_none(),
        "the store untouched"
    );
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(
        sample(
            &metrics,
            "hookgate_requests_total",
            &[("route", "hook"), ("outcome", "source_not_allowed")]
        ),
        Some(2.0)
    );
    gateway.shutdown().await;

    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "allow_from = [\"127.0.0.1\"]",
        "",
    );
    let gateway = TestGateway::start(&text).await;
    let admitted = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_inside"))
        .await;
    assert_eq!(admitted.status, StatusCode::OK);
    assert_eq!(upstream.count("evt_inside"), 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_client_is_judged() {
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "allow_from = [\"203.0.113.0/24\"]",
        "",
    )
    .replacen(
        "[server]\n",
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\n",
        1,
    );
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/hook");
    let sender = Sender::new();
    let admitted = sender.send(forwarded(&url, "evt_p1", "203.0.113.7")).await;
    assert_eq!(admitted.status, StatusCode::OK);
    let outsider = sender.send(forwarded(&url, "evt_p2", "198.51.100.1")).await;
    assert_eq!(outsider.code(), "source_not_allowed");
    // A client-written left part proves nothing: the last untrusted hop is
    // the one judged.
    let forged = sender
        .send(forwarded(&url, "evt_p3", "203.0.113.7, 198.51.100.1"))
        .await;
    assert_eq!(forged.code(), "source_not_allowed");
    assert_eq!(upstream.total(), 1);
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_ipv6_peer_is_judged_by_its_own_address() {
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "allow_from = [\"::1/128\"]",
        "",
    );
    let gateway = TestGateway::start_on(&text, "[::1]:0").await;
    let admitted = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_v6"))
        .await;
    assert_eq!(admitted.status, StatusCode::OK, "{:?}", admitted.json());
    assert_eq!(upstream.count("evt_v6"), 1);
    gateway.shutdown().await;

    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "allow_from = [\"2001:db8::/32\", \"127.0.0.1\"]",
        "",
    );
    let gateway = TestGateway::start_on(&text, "[::1]:0").await;
    let refused = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_v6_out"))
        .await;
    assert_eq!(refused.code(), "source_not_allowed");
    assert_eq!(upstream.count("evt_v6_out"), 0);
    gateway.shutdown().await;
}

/// Two gateways on one Redis: a pause through one holds both, nothing is
/// forwarded or claimed while paused, and the senders' retries go through
/// once the route resumes through the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sync_route_refuses_across_the_fleet_until_resumed() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = with_admin(
        &config_text(&upstream.url("/hook"), &Backend::Redis(redis.url()), "", ""),
        true,
    );
    let first = TestGateway::start(&text).await;
    let second = TestGateway::start(&text).await;
    let paused = first
        .control("hook", "pause", "by=alice&reason=consumer%20migration")
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.json());
    assert_eq!(paused.json()["changed"], true);
    assert_eq!(paused.json()["paused"]["by"], "alice");
    let again = first.control("hook", "pause", "by=bob").await;
    assert_eq!(again.json()["changed"], false, "already paused");
    assert_eq!(
        again.json()["paused"]["by"],
        "alice",
        "the first pause stands"
    );

    let refused = Sender::new()
        .deliver(&first.url("/hook"), &event("evt_paused"))
        .await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.code(), "route_paused");
    assert_eq!(refused.headers["retry-after"], "30");
    // The other instance learns it from the store within a second or so.
    assert!(
        eventually(Duration::from_secs(3), || async {
            let listed = get(&second.admin_url("/admin/routes"), Some(ADMIN_TOKEN)).await;
            !listed.json()["routes"][0]["paused"].is_null()
        })
        .await
    );
    let refused = Sender::new()
        .deliver(&second.url("/hook"), &event("evt_paused"))
        .await;
    assert_eq!(refused.code(), "route_paused");
    assert_eq!(upstream.total(), 0, "nothing forwarded while paused");
    assert!(
        first.record("hook", "evt_paused").await.is_none(),
        "nothing claimed"
    );
    let redeliver = request(
        Method::POST,
        &first.admin_url("/admin/routes/hook/keys/evt_paused/redeliver"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(redeliver.code(), "route_paused");
    let listed = get(&second.admin_url("/admin/routes"), Some(ADMIN_TOKEN)).await;
    let route = &listed.json()["routes"][0];
    assert_eq!(route["name"], "hook");
    assert_eq!(route["paused"]["reason"], "consumer migration");
    let metrics = scrape(&second.admin_url("/metrics")).await;
    assert_eq!(
        sample(&metrics, "hookgate_route_paused", &[("route", "hook")]),
        Some(1.0)
    );
    let metrics = scrape(&first.admin_url("/metrics")).await;
    assert_eq!(
        sample(
            &metrics,
            "hookgate_route_control_changes_total",
            &[("route", "hook"), ("action", "pause")]
        ),
        Some(1.0),
        "a repeated pause is no change"
    );
    assert_eq!(
        sample(
            &metrics,
            "hookgate_requests_total",
            &[("route", "hook"), ("outcome", "route_paused")]
        ),
        Some(1.0)
    );

    let resumed = second.control("hook", "resume", "by=alice").await;
    assert_eq!(resumed.json()["changed"], true);
    assert!(resumed.json()["paused"].is_null());
    let through = Sender::new()
        .deliver_until_settled(&first.url("/hook"), &event("evt_paused"))
        .await;
    assert_eq!(through.status, StatusCode::OK);
    let replayed = Sender::new()
        .deliver(&second.url("/hook"), &event("evt_paused"))
        .await;
    assert!(replayed.replayed());
    assert_eq!(upstream.count("evt_paused"), 1);
    first.shutdown().await;
    second.shutdown().await;
}

/// The maintenance window: an async route paused (by the CLI) keeps
/// accepting, holds its events through a gateway restart, and resuming
/// delivers every one of them once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_async_route_accepts_and_holds_through_a_restart_then_delivers_once() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let admin = format!("http://127.0.0.1:{}", free_port());
    let text = with_admin(
        &config_text(
            &upstream.url("/hook"),
            &Backend::Embedded(dir.path().join("hookgate.db")),
            "delivery = \"async\"\nprocessing_ttl = \"2s\"",
            "",
        ),
        true,
    )
    .replacen(
        "[admin]\nlisten = \"127.0.0.1:0\"",
        &format!("[admin]\nlisten = \"{}\"", &admin[7..]),
        1,
    );
    let (config, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&config, port).await;
    let said = routes_cli(&admin, &["pause", "hook", "--reason", "deploying v2"]);
    assert!(said.contains("hook paused"), "{said}");
    let listed = routes_cli(&admin, &["list"]);
    assert!(
        listed.contains("paused") && listed.contains("ops-alice: deploying v2"),
        "{listed}"
    );
    let ids: Vec<String> = (0..50).map(|i| format!("evt_hold_{i}")).collect();
    accept_all(&gateway.url("/hook"), &ids).await;
    worker_passes_at(&format!("{admin}/metrics"), 3).await;
    assert_eq!(upstream.total(), 0, "held while paused");
    assert!(gateway.stop("TERM").success());

    let mut gateway = GatewayProcess::start(&config, port).await;
    worker_passes_at(&format!("{admin}/metrics"), 4).await;
    assert_eq!(upstream.total(), 0, "still paused after the restart");
    let metrics = scrape(&format!("{admin}/metrics")).await;
    assert_eq!(
        sample(&metrics, "hookgate_route_paused", &[("route", "hook")]),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "hookgate_queue_depth",
            &[("route", "hook"), ("state", "queued")]
        ),
        Some(50.0)
    );
    let listing = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["events", "list", "--route", "hook"])
        .env("HOOKGATE_ADMIN_URL", &admin)
        .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    let listing = String::from_utf8(listing.stdout).unwrap();
    assert!(
        listing.starts_with("route hook is paused") && listing.contains("evt_hold_"),
        "events list says the route is paused: {listing}"
    );

    let said = routes_cli(&admin, &["resume", "hook"]);
    assert!(said.contains("hook resumed"), "{said}");
    assert!(upstream.all_reached(&ids, Duration::from_secs(10)).await);
    worker_passes_at(&format!("{admin}/metrics"), 3).await;
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    let logs = gateway.logs();
    assert!(gateway.stop("TERM").success());
    assert!(
        logs.contains("route resumed") && logs.contains("ops-alice"),
        "the resume is logged with its caller: {logs}"
    );
}

/// Five failures open the breaker: the next deliveries are refused without
/// a call; after `open_for` one probe goes through, a failed probe opens it
/// again and a good one closes it.
#[tokio::test]
async fn a_circuit_breaker_stops_calling_a_failing_upstream_then_probes() {
    let failing = Arc::new(AtomicBool::new(true));
    let upstream = flaky(&failing).await;
    let text = with_admin(
        &config_text(
            &upstream.url("/hook"),
            &Backend::Memory,
            "circuit_breaker = { failures = 5, window = \"30s\", open_for = \"1s\" }",
            "",
        ),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/hook");
    let sender = Sender::new();
    for i in 0..5 {
        let answer = sender.deliver(&url, &event(&format!("evt_cb_{i}"))).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(upstream.total(), 5);
    for i in 5..8 {
        let held = sender.deliver(&url, &event(&format!("evt_cb_{i}"))).await;
        assert_eq!(held.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(held.code(), "upstream_circuit_open");
        assert_eq!(held.headers["retry-after"], "1");
    }
    assert_eq!(upstream.total(), 5, "no call while the breaker is open");
    assert!(
        gateway.record("hook", "evt_cb_5").await.is_none(),
        "nothing claimed"
    );
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let open = |metrics: &str| {
        sample(
            metrics,
            "hookgate_circuit_breaker_open",
            &[("route", "hook")],
        )
    };
    let opened = |metrics: &str| {
        sample(
            metrics,
            "hookgate_circuit_breaker_opened_total",
            &[("route", "hook")],
        )
    };
    assert_eq!(open(&metrics), Some(1.0));
    assert_eq!(opened(&metrics), Some(1.0));
    let state = || async {
        let listed = get(&gateway.admin_url("/admin/routes"), Some(ADMIN_TOKEN)).await;
        listed.json()["routes"][0]["circuit_breaker"]["state"].clone()
    };
    assert_eq!(state().await, "open");
    // Once open_for has passed, the breaker says it takes a probe.
    let probing = || async { state().await == "half_open" };

    // The probe fails: open again.
    assert!(eventually(Duration::from_secs(5), probing).await);
    let probe = sender.deliver(&url, &event("evt_cb_probe")).await;
    assert_eq!(probe.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(probe.code(), "", "the upstream's own 503, not hookgate's");
    assert_eq!(upstream.total(), 6, "exactly one probe");
    let held = sender.deliver(&url, &event("evt_cb_8")).await;
    assert_eq!(held.code(), "upstream_circuit_open");
    assert_eq!(
        opened(&scrape(&gateway.admin_url("/metrics")).await),
        Some(2.0)
    );

    // The upstream recovers: the next probe closes it.
    failing.store(false, Ordering::SeqCst);
    assert!(eventually(Duration::from_secs(5), probing).await);
    let probe = sender.deliver(&url, &event("evt_cb_probe")).await;
    assert_eq!(
        probe.status,
        StatusCode::OK,
        "the senders' retry goes through"
    );
    for i in 0..9 {
        let answer = sender.deliver(&url, &event(&format!("evt_cb_{i}"))).await;
        assert_eq!(answer.status, StatusCode::OK, "evt_cb_{i}");
    }
    assert_eq!(
        open(&scrape(&gateway.admin_url("/metrics")).await),
        Some(0.0)
    );
    for (key, count) in upstream.counts() {
        assert!(
            count <= 2,
            "{key}: one failed call and one good one at most"
        );
    }
    gateway.shutdown().await;
}

/// An async route's breaker holds its deliveries: after the failures, no
/// call until `open_for` has passed; the probe's success lets the rest
/// through, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_routes_breaker_holds_its_deliveries() {
    let failing = Arc::new(AtomicBool::new(true));
    let upstream = flaky(&failing).await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        r#"delivery = "async"
processing_ttl = "2s"
max_in_flight = 1
retry_backoff = { initial = "10ms", max = "20ms" }
circuit_breaker = { failures = 3, window = "30s", open_for = "2s" }"#,
        "",
    );
    let gateway = TestGateway::start(&text).await;
    let ids: Vec<String> = (0..10).map(|i| format!("evt_acb_{i}")).collect();
    accept_all(&gateway.url("/hook"), &ids).await;
    assert!(eventually(Duration::from_secs(5), || ready(upstream.total() >= 3)).await);
    let opened_at = Instant::now();
    gateway.worker_passes(4).await;
    assert_eq!(upstream.total(), 3, "held while open");
    failing.store(false, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(10), || ready(ids.iter().all(|id| {
            upstream
                .seen()
                .iter()
                .any(|seen| seen.key() == *id && seen.status == StatusCode::OK)
        })))
        .await
    );
    let first_after = upstream.seen()[3].at;
    assert!(
        first_after.duration_since(opened_at) >= Duration::from_millis(1500),
        "the probe waited for open_for"
    );
    for id in &ids {
        let good = (upstream.seen().iter())
            .filter(|seen| seen.key() == *id && seen.status == StatusCode::OK)
            .count();
        assert_eq!(good, 1, "{id} delivered once");
    }
    gateway.shutdown().await;
}

/// Senders at three times a sync route's upstream rate: the upstream never
/// sees more than the rate plus the burst in any second; the rest are told
/// 429 with Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_routes_rate_limit_refuses_the_excess() {
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "upstream_rate = \"20/s\"\nupstream_burst = 5",
        "",
    );
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/hook");
    let mut sends = Vec::new();
    let started = Instant::now();
    for i in 0..180u64 {
        let url = url.clone();
        let at = started + Duration::from_millis(i * 1000 / 60);
        sends.push(tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            Sender::new()
                .deliver(&url, &event(&format!("evt_rate_{i}")))
                .await
        }));
    }
    let (mut forwarded, mut limited) = (0, 0);
    for send in sends {
        let answer = send.await.unwrap();
        match answer.status {
            StatusCode::OK => forwarded += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(answer.code(), "rate_limited");
                assert!(answer.headers.contains_key("retry-after"));
                limited += 1;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(forwarded + limited, 180);
    assert_eq!(upstream.total(), forwarded);
    let busiest = busiest_second(&upstream);
    assert!(
        busiest <= 25,
        "{busiest} calls in one second (rate 20, burst 5)"
    );
    assert!(limited >= 90, "only {limited} refused at 3x the rate");
    for (key, count) in upstream.counts() {
        assert_eq!(count, 1, "{key}");
    }
    gateway.shutdown().await;
}

/// An async route's rate paces its deliveries instead: everything accepted
/// is delivered once, never faster than the rate plus the burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_routes_rate_limit_paces_its_deliveries() {
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "delivery = \"async\"\nupstream_rate = \"20/s\"\nupstream_burst = 5",
        "",
    );
    let gateway = TestGateway::start(&text).await;
    let ids: Vec<String> = (0..60).map(|i| format!("evt_pace_{i}")).collect();
    accept_all(&gateway.url("/hook"), &ids).await;
    assert!(upstream.all_reached(&ids, Duration::from_secs(15)).await);
    let busiest = busiest_second(&upstream);
    assert!(
        busiest <= 25,
        "{busiest} calls in one second (rate 20, burst 5)"
    );
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    gateway.shutdown().await;
}
