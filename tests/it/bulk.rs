//! Bulk actions: "redeliver everything that failed with 503" in one action
//! that runs in the gateway — only the matches are sent, each once, a
//! cancel stops it, a caller hanging up does not, two at once over the
//! same events send each once, and the CLI counts, starts and follows it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use tokio::io::AsyncWriteExt;

use crate::support::*;

const EACH: usize = 1000;

fn keys(status: &str) -> Vec<String> {
    (0..EACH).map(|i| format!("evt_{status}_{i}")).collect()
}

async fn admin(gateway: &TestGateway, method: Method, path: &str) -> Answer {
    request(method, &gateway.admin_url(path), Some(ADMIN_TOKEN)).await
}

/// Poll bulk action `id` until it is no longer running.
async fn ended(gateway: &TestGateway, id: &str) -> serde_json::Value {
    let path = format!("/admin/bulk/{id}");
    let state = || async {
        let bulk = admin(gateway, Method::GET, &path).await;
        assert_eq!(bulk.status, StatusCode::OK, "{:?}", bulk.body);
        bulk.json()
    };
    let ended = eventually(Duration::from_secs(120), || async {
        state().await["state"] != "running"
    });
    assert!(ended.await, "still running: {}", state().await);
    state().await
}

async fn matched(gateway: &TestGateway, query: &str) -> u64 {
    let path = format!("/admin/events/redeliver?{query}&dry_run=true");
    let count = admin(gateway, Method::POST, &path).await;
    assert_eq!(count.status, StatusCode::OK, "{:?}", count.body);
    count.json()["matched"].as_u64().unwrap()
}

/// A gateway on the memory store whose events are dead after one
/// refused attempt.
async fn one_attempt_gateway(upstream: &Upstream) -> TestGateway {
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "max_attempts = 1",
        "",
    );
    TestGateway::start(&with_admin(&text, true)).await
}

/// Deliver each of `ids` once, 16 senders at a time.
async fn deliver_all(gateway: &TestGateway, ids: &[String]) {
    let url = gateway.url("/hook");
    let mut senders = tokio::task::JoinSet::new();
    for part in ids.chunks(ids.len().div_ceil(16)) {
        let (part, url, sender) = (part.to_vec(), url.clone(), Sender::new());
        senders.spawn(async move {
            for id in part {
                sender.deliver_to_upstream(&url, &event(&id)).await;
            }
        });
    }
    while let Some(done) = senders.join_next().await {
        done.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_redelivery_sends_each_match_once_and_nothing_else() {
    // Until healed, the upstream refuses evt_503_* with 503 and evt_500_*
    // with 500: one attempt each makes 2,000 dead letters.
    let healed = Arc::new(AtomicBool::new(false));
    let upstream = Upstream::with({
        let healed = Arc::clone(&healed);
        move |seen| {
            let key = seen.key();
            let status = match (healed.load(Ordering::SeqCst), key.contains("_503_")) {
                (true, _) => StatusCode::OK,
                (false, true) => StatusCode::SERVICE_UNAVAILABLE,
                (false, false) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            Plan {
                status,
                ..ok_plan(seen)
            }
        }
    })
    .await;
    let gateway = one_attempt_gateway(&upstream).await;
    let all: Vec<String> = [keys("503"), keys("500")].concat();
    deliver_all(&gateway, &all).await;
    assert_eq!(
        matched(&gateway, "route=hook&state=dead").await,
        2 * EACH as u64
    );
    healed.store(true, Ordering::SeqCst);

    // A dry run counts and sends nothing.
    assert_eq!(
        matched(&gateway, "route=hook&state=dead&status=503").await,
        EACH as u64
    );
    assert_eq!(upstream.total(), 2 * EACH);

    // The caller hangs up once it has asked: the action runs on.
    let addr = gateway
        .admin_url("")
        .trim_start_matches("http://")
        .to_owned();
    let mut caller = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let ask = format!(
        "POST /admin/events/redeliver?route=hook&state=dead&status=503&rate=2000/s HTTP/1.1\r\n\
         host: {addr}\r\nauthorization: Bearer {ADMIN_TOKEN}\r\ncontent-length: 0\r\n\r\n"
    );
    caller.write_all(ask.as_bytes()).await.unwrap();
    let first = || async {
        let list = admin(&gateway, Method::GET, "/admin/bulk").await.json();
        list["bulk"][0]["id"].as_str().map(str::to_owned)
    };
    let began = eventually(Duration::from_secs(60), || async {
        first().await.is_some()
    });
    assert!(began.await, "no bulk action began");
    let id = first().await.unwrap();
    // Gone without reading the answer, long before the action ends.
    drop(caller);
    let bulk = ended(&gateway, &id).await;
    assert_eq!(bulk["state"], "finished", "{bulk}");
    assert_eq!(bulk["matched"], EACH, "{bulk}");
    assert_eq!(bulk["delivered"], EACH, "{bulk}");
    assert_eq!(bulk["action"], "redeliver");
    assert_eq!(bulk["selection"], "route=hook state=dead status=503");
    assert!(
        bulk["by"].as_str().unwrap().contains("as operator"),
        "{bulk}"
    );
    for key in keys("503") {
        assert_eq!(
            upstream.count(&key),
            2,
            "{key}: the first delivery and one redelivery"
        );
    }
    for key in keys("500") {
        assert_eq!(
            upstream.count(&key),
            1,
            "{key} did not match and was left alone"
        );
    }
    assert_eq!(
        matched(&gateway, "route=hook&state=dead").await,
        EACH as u64
    );

    // A slow one, cancelled: what was sent stays sent, nothing more is.
    let started = admin(
        &gateway,
        Method::POST,
        "/admin/events/redeliver?route=hook&state=dead&status=500&rate=20/s",
    )
    .await;
    assert_eq!(started.status, StatusCode::ACCEPTED, "{:?}", started.body);
    let started = started.json();
    assert_eq!(started["matched"], EACH);
    let id = started["id"].as_str().unwrap().to_owned();
    let path = format!("/admin/bulk/{id}");
    let three = eventually(Duration::from_secs(30), || async {
        let bulk = admin(&gateway, Method::GET, &path).await;
        bulk.json()["delivered"].as_u64().unwrap() >= 3
    });
    assert!(three.await, "three delivered");
    let cancelled = admin(&gateway, Method::DELETE, &format!("/admin/bulk/{id}")).await;
    assert_eq!(cancelled.status, StatusCode::OK);
    let bulk = ended(&gateway, &id).await;
    assert_eq!(bulk["state"], "cancelled", "{bulk}");
    assert_eq!(bulk["cancelled_by"], "operator");
    let sent = bulk["delivered"].as_u64().unwrap();
    assert!(sent < EACH as u64 / 2, "{bulk}");
    let twice = keys("500")
        .iter()
        .filter(|key| upstream.count(key) == 2)
        .count();
    assert_eq!(
        twice as u64, sent,
        "each redelivery the cancelled action counted, and no other"
    );
    let left = matched(&gateway, "route=hook&state=dead&status=500").await;
    assert_eq!(left, EACH as u64 - sent);

    // Two at once over the same dead letters — one through the API, one
    // through the CLI, which follows its action to the end — send each once.
    let api = admin(
        &gateway,
        Method::POST,
        "/admin/events/redeliver?route=hook&state=dead&rate=5000/s",
    );
    let command = {
        let admin_url = gateway.admin_url("");
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
                .args(["events", "redeliver", "--route", "hook", "--state", "dead"])
                .args(["--rate", "5000/s", "--json", "--admin", &admin_url])
                .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
                .output()
                .unwrap()
        })
    };
    let (api, command) = tokio::join!(api, command);
    let command = command.unwrap();
    assert!(command.status.success(), "{command:?}");
    let followed: serde_json::Value = serde_json::from_slice(&command.stdout).unwrap();
    assert_ne!(
        followed["state"], "running",
        "the CLI follows it to its end"
    );
    let api = ended(&gateway, api.json()["id"].as_str().unwrap()).await;
    let delivered = api["delivered"].as_u64().unwrap() + followed["delivered"].as_u64().unwrap();
    assert_eq!(delivered, left, "{api} {followed}");
    for key in keys("500") {
        assert_eq!(upstream.count(&key), 2, "{key}");
    }
    assert_eq!(matched(&gateway, "route=hook&state=dead").await, 0);

    // The CLI's dry run and the list of bulk actions.
    let dry = events_cli(
        &gateway,
        &[
            "redeliver",
            "--route",
            "hook",
            "--state",
            "completed",
            "--dry-run",
        ],
    );
    assert!(dry.status.success(), "{dry:?}");
    let said = String::from_utf8_lossy(&dry.stdout);
    assert!(
        said.contains(&format!("{} events match", 2 * EACH)),
        "{said}"
    );
    let listed = events_cli(&gateway, &["bulk", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), 4);
    let unknown = events_cli(&gateway, &["bulk", "status", "b_0000000000000000"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("bulk_not_found"));
    assert_eq!(
        upstream.total(),
        4 * EACH,
        "the first deliveries and one redelivery each"
    );
    gateway.shutdown().await;
}

/// A bulk action waits while its route is paused — it neither skips nor
/// sends — and goes on when it is resumed; a bulk forget needs a filter;
/// bad input is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_action_waits_for_a_paused_route() {
    let healed = Arc::new(AtomicBool::new(false));
    let upstream = Upstream::with({
        let healed = Arc::clone(&healed);
        move |seen| Plan {
            status: match healed.load(Ordering::SeqCst) {
                true => StatusCode::OK,
                false => StatusCode::SERVICE_UNAVAILABLE,
            },
            ..ok_plan(seen)
        }
    })
    .await;
    let gateway = one_attempt_gateway(&upstream).await;
    let sender = Sender::new();
    for i in 0..20 {
        sender
            .deliver(&gateway.url("/hook"), &event(&format!("evt_{i}")))
            .await;
    }
    healed.store(true, Ordering::SeqCst);
    // The gateway's own history has them, in its live bucket.
    let history = admin(&gateway, Method::GET, "/admin/history").await.json();
    assert_eq!(history["step_ms"], 300_000);
    let buckets = history["routes"]["hook"].as_array().unwrap();
    assert_eq!(buckets.last().unwrap()["upstream_error"], 20, "{history}");
    let paused = admin(&gateway, Method::POST, "/admin/routes/hook/pause?by=test").await;
    assert_eq!(paused.status, StatusCode::OK);
    let started = admin(
        &gateway,
        Method::POST,
        "/admin/events/redeliver?route=hook&state=dead&rate=1000/s",
    )
    .await
    .json();
    let id = started["id"].as_str().unwrap().to_owned();
    // Held, not skipped: it says what holds it, and nothing is sent,
    // nothing done, while paused.
    let status = format!("/admin/bulk/{id}");
    let waits = eventually(Duration::from_secs(5), || async {
        admin(&gateway, Method::GET, &status).await.json()["waiting_on"] == "route_paused"
    })
    .await;
    assert!(waits, "never said it waits for the pause");
    let held = admin(&gateway, Method::GET, &status).await.json();
    assert_eq!(held["state"], "running", "{held}");
    assert_eq!(held["done"], 0, "{held}");
    assert_eq!(upstream.total(), 20);
    admin(&gateway, Method::POST, "/admin/routes/hook/resume?by=test").await;
    let bulk = ended(&gateway, &id).await;
    assert_eq!(bulk["delivered"], 20, "{bulk}");
    assert_eq!(bulk["waiting_on"], serde_json::Value::Null, "{bulk}");
    assert_eq!(upstream.total(), 40);

    for bad in [
        "/admin/events/redeliver?rate=fast",
        "/admin/events/redeliver?rate=0/s",
        // Too slow to pace (it panicked the bulk task once), or too fast.
        "/admin/events/redeliver?rate=1e-300",
        "/admin/events/redeliver?rate=1e-300/s",
        "/admin/events/redeliver?rate=0.5/h",
        "/admin/events/redeliver?rate=20000/s",
        "/admin/routes/hook/dead-letters/redeliver?rate=1e-300",
        "/admin/events/redeliver?state=gone",
    ] {
        let answer = admin(&gateway, Method::POST, bad).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(answer.code(), "bad_request", "{bad}");
    }
    for usage in [
        &["redeliver", "hook"][..],
        &["forget"],
        &["replay", "--status", "503", "hook"],
    ] {
        let refused = events_cli(&gateway, usage);
        assert_eq!(refused.status.code(), Some(2), "{usage:?}: {refused:?}");
    }
    let nothing = admin(&gateway, Method::POST, "/admin/events/resend").await;
    assert_eq!(nothing.status, StatusCode::NOT_FOUND);
    let wrong = admin(&gateway, Method::GET, "/admin/events/redeliver").await;
    assert_eq!(wrong.status, StatusCode::METHOD_NOT_ALLOWED);

    // A bulk forget of the completed: their next delivery is new again.
    let forget = admin(
        &gateway,
        Method::POST,
        "/admin/events/forget?route=hook&state=completed",
    )
    .await;
    assert_eq!(forget.status, StatusCode::ACCEPTED);
    let forget = ended(&gateway, forget.json()["id"].as_str().unwrap()).await;
    assert_eq!(forget["delivered"], 20, "{forget}");
    assert_eq!(matched(&gateway, "route=hook").await, 0);
    // The audit names each change, who asked and how it was answered.
    let audit = admin(&gateway, Method::GET, "/admin/audit").await.json();
    let actions = audit["actions"].as_array().unwrap();
    let asked = |path: &str| {
        actions
            .iter()
            .find(|a| a["path"].as_str().unwrap().starts_with(path))
            .cloned()
    };
    let forget = asked("/admin/events/forget?route=hook&state=completed").expect("the bulk forget");
    assert_eq!(
        (forget["method"].as_str(), forget["status"].as_u64()),
        (Some("POST"), Some(202))
    );
    assert_eq!(
        (forget["via"].as_str(), forget["role"].as_str()),
        (Some("token"), Some("operator"))
    );
    assert_eq!(
        asked("/admin/events/redeliver?rate=fast").unwrap()["status"],
        400
    );
    assert!(asked("/admin/history").is_none(), "reads are not actions");
    gateway.shutdown().await;
}

/// `events list --all` while a bulk action retries the very records it
/// lists (each moves to the front of the listing, behind the walk's
/// cursor): every record is shown, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_listing_holds_still_while_its_records_are_retried() {
    let upstream = Upstream::with(|seen| Plan {
        status: StatusCode::SERVICE_UNAVAILABLE,
        ..ok_plan(seen)
    })
    .await;
    let gateway = one_attempt_gateway(&upstream).await;
    let all: Vec<String> = (0..2 * EACH).map(|i| format!("evt_{i}")).collect();
    deliver_all(&gateway, &all).await;
    let retry = admin(
        &gateway,
        Method::POST,
        "/admin/events/redeliver?route=hook&state=dead&rate=10000/s",
    )
    .await;
    let id = retry.json()["id"].as_str().unwrap().to_owned();
    let listed = {
        let admin_url = gateway.admin_url("");
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
                .args(["events", "list", "--state", "dead", "--all", "--json"])
                .args(["--limit", "10", "--admin", &admin_url])
                .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    assert!(listed.status.success(), "{listed:?}");
    let bulk = admin(&gateway, Method::GET, &format!("/admin/bulk/{id}"))
        .await
        .json();
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let mut keys: Vec<&str> = (listed.as_array().unwrap().iter())
        .map(|event| event["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    let shown = keys.len();
    keys.dedup();
    assert_eq!(shown, keys.len(), "a record shown twice");
    assert_eq!(
        keys.len(),
        2 * EACH,
        "every record, while {} were retried",
        bulk["done"]
    );
    ended(&gateway, &id).await;
    gateway.shutdown().await;
}

/// Two bulk redeliveries of the same filtered dead letters at once, on
/// each store: the matches are sent once each, the rest left alone.
async fn two_bulk_actions_at_once(backend: Backend) {
    let healed = Arc::new(AtomicBool::new(false));
    let upstream = Upstream::with({
        let healed = Arc::clone(&healed);
        move |seen| Plan {
            status: match (healed.load(Ordering::SeqCst), seen.key().contains("_503_")) {
                (true, _) => StatusCode::OK,
                (false, true) => StatusCode::SERVICE_UNAVAILABLE,
                (false, false) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ..ok_plan(seen)
        }
    })
    .await;
    let text = config_text(&upstream.url("/hook"), &backend, "max_attempts = 1", "");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let ids: Vec<String> = (0..40)
        .map(|i| format!("evt_{}_{i}", if i % 2 == 0 { "503" } else { "500" }))
        .collect();
    deliver_all(&gateway, &ids).await;
    healed.store(true, Ordering::SeqCst);
    let path = "/admin/events/redeliver?route=hook&state=dead&status=503&rate=1000/s";
    let (a, b) = tokio::join!(
        admin(&gateway, Method::POST, path),
        admin(&gateway, Method::POST, path)
    );
    let mut delivered = 0;
    let mut both = Vec::new();
    for started in [a, b] {
        assert_eq!(started.status, StatusCode::ACCEPTED, "{:?}", started.body);
        let bulk = ended(&gateway, started.json()["id"].as_str().unwrap()).await;
        assert_eq!(bulk["failed"], 0, "{bulk}");
        delivered += bulk["delivered"].as_u64().unwrap();
        both.push(bulk);
    }
    let counts: Vec<usize> = ids.iter().map(|id| upstream.count(id)).collect();
    assert_eq!(delivered, 20, "{both:?}, upstream counts {counts:?}");
    for id in &ids {
        let expected = if id.contains("_503_") { 2 } else { 1 };
        assert_eq!(upstream.count(id), expected, "{id}");
    }
    assert_eq!(
        matched(&gateway, "route=hook&state=dead&status=500").await,
        20
    );
    gateway.shutdown().await;
}

crate::on_backends!(two_bulk_actions_at_once: [embedded, redis, cluster, postgres]);
