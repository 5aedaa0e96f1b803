//! Queue bounds (docs/guide/async-delivery.md, "Asynchronous delivery"): an async route holds at
//! most `max_queued` events and `max_queued_bytes` undelivered, and every
//! async route of a store together `store.max_queued_bytes`; past a bound
//! a new event is answered 503 `queue_full` with `Retry-After` (its sender
//! keeps it), a duplicate of an accepted one as before, and once the
//! queue drains new events are accepted again — each delivered once.

use std::time::Duration;

use http::StatusCode;

use crate::support::*;

const ASYNC: &str = "delivery = \"async\"\nretry_backoff = { initial = \"50ms\", max = \"200ms\" }";

/// An event of about `size` bytes.
fn sized(id: &str, size: usize) -> String {
    format!(
        r#"{{"id":"{id}","type":"invoice.paid","pad":"{}"}}"#,
        "x".repeat(size)
    )
}

/// New events of `size` bytes (`evt_more_0`, `evt_more_1`, …) until one
/// is refused — the queues are measured every 2 s — within 15 s: those
/// accepted on the way, the refused one's id, and the refusal.
async fn until_full(url: &str, size: usize) -> (Vec<String>, String, Answer) {
    let sender = Sender::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut accepted = Vec::new();
    // One every 200 ms: the bound is seen within a measurement or two.
    let mut every = pace(Duration::from_millis(200));
    loop {
        every.tick().await;
        let id = format!("evt_more_{}", accepted.len());
        let answer = sender.deliver(url, &sized(&id, size)).await;
        if answer.status != StatusCode::ACCEPTED || tokio::time::Instant::now() > deadline {
            return (accepted, id, answer);
        }
        accepted.push(id);
    }
}

/// Send `body` until the gateway accepts it (room again), within 15 s.
async fn until_accepted(url: &str, body: &str) -> Answer {
    let (sender, last) = (Sender::new(), std::sync::Mutex::new(None));
    let accepted = eventually(Duration::from_secs(15), || async {
        let answer = sender.deliver(url, body).await;
        let accepted = answer.status == StatusCode::ACCEPTED;
        *last.lock().unwrap() = Some(answer);
        accepted
    });
    accepted.await;
    last.into_inner().unwrap().expect("delivered at least once")
}

/// The bound `route` or `store` sets fills with `held` paused events of
/// `size` bytes (and what arrives before the next measurement); then a
/// new one waits with its sender, a duplicate is answered, and after the
/// route resumes every event — the refused one, sent again — is
/// delivered once.
async fn a_full_queue_backs_off_its_senders(
    backend: Backend,
    (route, store): (&str, &str),
    size: usize,
    held: usize,
) {
    let upstream = Upstream::start().await;
    let route = format!("{ASYNC}\n{route}");
    let text = (config_text(&upstream.url("/"), &backend, &route, ""))
        .replace("[[routes]]", &format!("{store}\n[[routes]]"));
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let url = gateway.url("/hook");
    let paused = gateway.control("hook", "pause", "by=test").await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.json());
    let sender = Sender::new();
    let ids: Vec<String> = (0..held).map(|i| format!("evt_held_{i}")).collect();
    for id in &ids {
        let answer = sender.deliver_until_settled(&url, &sized(id, size)).await;
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{id}");
    }

    let (more, late, refused) = until_full(&url, size).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    assert_eq!(refused.json()["error"]["code"], "queue_full", "{refused:?}");
    assert_eq!(refused.headers["retry-after"], "60");
    let again = sender.deliver(&url, &sized(&ids[0], size)).await;
    assert_eq!(
        again.status,
        StatusCode::ACCEPTED,
        "a duplicate is answered as before"
    );
    assert!(again.replayed());
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let labels = [("route", "hook"), ("destination", "")];
    let bytes = sample(&metrics, "hookgate_queued_bytes", &labels).unwrap_or(0.0);
    assert!(bytes >= (held * size) as f64, "{bytes}: {metrics}");
    let refusals = [("route", "hook"), ("outcome", "queue_full")];
    assert!(sample(&metrics, "hookgate_requests_total", &refusals).unwrap_or(0.0) >= 1.0);

    gateway.control("hook", "resume", "").await;
    let answer = until_accepted(&url, &sized(&late, size)).await;
    assert_eq!(
        answer.status,
        StatusCode::ACCEPTED,
        "room again once drained: {answer:?}"
    );
    let all: Vec<String> = (ids.iter().chain(&more).cloned()).chain([late]).collect();
    assert!(upstream.all_reached(&all, Duration::from_secs(15)).await);
    for id in &all {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_queued_bounds_a_routes_events_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Embedded(dir.path().join("q.db"));
    a_full_queue_backs_off_its_senders(backend, ("max_queued = 3", ""), 100, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_queued_bytes_bounds_a_routes_bytes_on_redis() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    // Room for the three held events whenever the queue is measured: a
    // 3,000-byte event counts about 5 KB on Redis (docs/operations/deploying.md,
    // "Sizing"), and two of them measured before the third is sent must
    // leave room for it.
    let bound = ("max_queued_bytes = \"16KiB\"", "");
    a_full_queue_backs_off_its_senders(Backend::Redis(redis.url()), bound, 3000, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_bound_holds_every_route_on_postgres() {
    let database = TestDatabase::create().await;
    // As on Redis: room for the held events however the measurements fall
    // (about 3.9 KB each here).
    let bound = ("", "max_queued_bytes = \"16KiB\"");
    a_full_queue_backs_off_its_senders(Backend::Postgres(database.url()), bound, 3000, 3).await;
}

/// A route with destinations is full when one of its destinations is:
/// the hand-out could not refuse the event later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_destination_backs_off_its_routes_senders() {
    let ledger = Upstream::start().await;
    let route = format!("{ASYNC}\nmax_queued = 2");
    let text = config_text("http://removed", &Backend::Memory, &route, "")
        .replace("upstream = \"http://removed\"\n", "");
    let text = with_admin(
        &format!(
            "{text}\n[[routes.destinations]]\nname = \"ledger\"\nupstream = \"{}\"\n",
            ledger.url("/ledger")
        ),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/hook");
    let paused = gateway
        .control("hook", "pause", "destination=ledger&by=test")
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.json());
    for id in ["evt_1", "evt_2"] {
        let answer = Sender::new().deliver(&url, &sized(id, 10)).await;
        assert_eq!(answer.status, StatusCode::ACCEPTED);
    }
    let (more, late, refused) = until_full(&url, 10).await;
    assert_eq!(refused.json()["error"]["code"], "queue_full", "{refused:?}");
    gateway
        .control("hook", "resume", "destination=ledger")
        .await;
    let answer = until_accepted(&url, &sized(&late, 10)).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    let all: Vec<String> = (["evt_1", "evt_2"].map(String::from).into_iter())
        .chain(more)
        .chain([late])
        .collect();
    assert!(ledger.all_reached(&all, Duration::from_secs(15)).await);
    for id in &all {
        assert_eq!(ledger.count(id), 1, "{id}");
    }
    gateway.shutdown().await;
}
