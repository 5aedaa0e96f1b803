//! Why did it fail (docs/guide/dead-letters.md, "Failed events and dead letters"): a record
//! keeps its last failed attempts — entrance, class, status, duration, the
//! error text and the start of the upstream's answer — and the admin API,
//! `hookgate events show`, and the logs (route and key on every line about
//! an event) say so.

use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::*;

const PAYMENT_DB_DOWN: &str = r#"{"error":"orders DB: connection pool exhausted"}"#;

/// An upstream that refuses every call with a 500 and a reason.
async fn refusing() -> Upstream {
    Upstream::with(|seen| Plan {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        body: PAYMENT_DB_DOWN.into(),
        ..ok_plan(seen)
    })
    .await
}

fn show(admin_url: &str, key: &str) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["events", "show", "hook", key, "--admin", admin_url])
        .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A worker's refused attempts, each with the upstream's own words, shown
/// by the admin API and the CLI; the planned next attempt too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_says_what_the_upstream_answered() {
    let upstream = refusing().await;
    let route = r#"delivery = "async"
max_attempts = 3
retry_backoff = { initial = "20ms", max = "40ms" }"#;
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, route, "");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let answer = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_pay"))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let parked = eventually(Duration::from_secs(10), || async {
        gateway
            .record("hook", "evt_pay")
            .await
            .is_some_and(|record| record.state.as_str() == "dead")
    });
    assert!(parked.await, "three refused attempts park it");

    let shown = request(
        Method::GET,
        &gateway.admin_url("/admin/routes/hook/keys/evt_pay"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(shown.status, StatusCode::OK);
    let record = shown.json();
    let history = record["history"].as_array().expect("a history");
    assert_eq!(history.len(), 3, "{record}");
    for attempt in history {
        assert_eq!(attempt["kind"], "worker");
        assert_eq!(attempt["class"], "refused");
        assert_eq!(attempt["status"], 500);
        assert_eq!(attempt["body"], PAYMENT_DB_DOWN);
        assert!(attempt["at"].as_u64().unwrap() >= record["first_seen"].as_u64().unwrap());
        assert!(attempt["duration_ms"].is_u64());
    }
    assert!(
        history[0]["at"].as_u64() <= history[2]["at"].as_u64(),
        "oldest first"
    );
    assert_eq!(record["next_attempt_at"], serde_json::Value::Null, "parked");

    let admin_url = gateway.admin_url("");
    let printed = tokio::task::block_in_place(|| show(&admin_url, "evt_pay"));
    assert!(
        printed.contains("failed attempts (newest first):"),
        "{printed}"
    );
    assert!(printed.contains("worker   refused 500"), "{printed}");
    assert!(
        printed.contains(&format!("upstream said: {PAYMENT_DB_DOWN}")),
        "{printed}"
    );
    gateway.shutdown().await;
}

/// While an event is retried, its next attempt's time is on the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_event_shows_when_it_is_tried_next() {
    let upstream = refusing().await;
    let route = r#"delivery = "async"
retry_backoff = { initial = "1h", max = "1h" }"#;
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, route, "");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_later"))
        .await;
    let tried = eventually(Duration::from_secs(10), || async {
        gateway
            .record("hook", "evt_later")
            .await
            .is_some_and(|record| !record.history.is_empty())
    });
    assert!(tried.await, "the first attempt failed");
    let record = request(
        Method::GET,
        &gateway.admin_url("/admin/routes/hook/keys/evt_later"),
        Some(ADMIN_TOKEN),
    )
    .await
    .json();
    assert_eq!(record["state"], "queued");
    let next = record["next_attempt_at"].as_u64().expect("planned");
    let failed_at = record["history"][0]["at"].as_u64().unwrap();
    assert!(next > failed_at, "{record}");
    assert!(next <= failed_at + 3_600_000 + 1000, "{record}");
    let admin_url = gateway.admin_url("");
    let printed = tokio::task::block_in_place(|| show(&admin_url, "evt_later"));
    assert!(printed.contains("next attempt: in "), "{printed}");
    gateway.shutdown().await;
}

/// A refused connection: the error text is on the record, and every log
/// line about the event — the failed call, the dead letter — names its
/// route and key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_on_the_record_and_in_the_logs_with_its_key() {
    let closed = format!("http://127.0.0.1:{}/hook", free_port());
    let text = config_text(&closed, &Backend::Memory, "max_attempts = 1", "");
    let admin_port = free_port();
    let text = with_admin_on(&text, admin_port);
    let dir = tempfile::tempdir().unwrap();
    let (path, port) = write_config(dir.path(), &text);
    let mut process = GatewayProcess::start(&path, port).await;
    let answer = Sender::new()
        .deliver(&process.url("/hook"), &event("evt_conn"))
        .await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    let record = request(
        Method::GET,
        &format!("http://127.0.0.1:{admin_port}/admin/routes/hook/keys/evt_conn"),
        Some(ADMIN_TOKEN),
    )
    .await
    .json();
    assert_eq!(record["state"], "dead", "{record}");
    let attempt = &record["history"][0];
    assert_eq!(attempt["kind"], "sender");
    assert_eq!(attempt["class"], "not_delivered");
    assert!(attempt["status"].is_null());
    let error = attempt["error"].as_str().unwrap_or_default();
    assert!(
        error.to_ascii_lowercase().contains("connection refused"),
        "{record}"
    );

    let logs = process.logs();
    for message in ["upstream call failed", "event parked as a dead letter"] {
        let line = logs
            .lines()
            .find(|line| line.contains(message))
            .unwrap_or_else(|| panic!("no {message:?} line in {logs}"));
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(line["route"], "hook", "{line}");
        assert_eq!(line["key"], "evt_conn", "{line}");
    }
    process.stop("TERM");
}

/// "Retry now": a redelivery of a queued event makes it due at once, and
/// its workers deliver it instead of waiting for the planned attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_now_delivers_a_queued_event_at_once() {
    let (upstream, healthy) = Upstream::flaky().await;
    let route = r#"delivery = "async"
retry_backoff = { initial = "1h", max = "1h" }"#;
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, route, "");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_now"))
        .await;
    assert!(
        upstream
            .all_reached(&["evt_now".to_owned()], Duration::from_secs(10))
            .await
    );
    // The refused attempt is recorded a moment after the upstream saw it.
    let queued = eventually(Duration::from_secs(10), || async {
        (gateway.record("hook", "evt_now").await)
            .is_some_and(|record| record.state.as_str() == "queued")
    });
    assert!(queued.await, "queued again for its retry");
    healthy.store(true, std::sync::atomic::Ordering::SeqCst);
    let retried = request(
        Method::POST,
        &gateway.admin_url("/admin/routes/hook/keys/evt_now/redeliver"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(retried.status, StatusCode::OK, "{:?}", retried.body);
    assert_eq!(
        retried.json()["state"],
        "queued",
        "made due, for its workers"
    );
    let delivered = eventually(Duration::from_secs(10), || async {
        (gateway.record("hook", "evt_now").await)
            .is_some_and(|record| record.state.as_str() == "completed")
    });
    assert!(delivered.await, "delivered at once, not in an hour");
    assert_eq!(
        upstream.count("evt_now"),
        2,
        "the refused attempt and one more"
    );
    gateway.shutdown().await;
}
