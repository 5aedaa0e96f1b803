//! One delivery, many entrances: the seams between a sender's delivery, the
//! async workers, the hybrid and an operator's actions, against a running
//! gateway and an upstream that counts what it was sent. Each test is a
//! defect that was reproduced against the binary before the record's life
//! became one set of rules (docs/operations/fleets.md, "The record's life").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::*;

/// Async route lines with quick retries.
const ASYNC: &str = r#"delivery = "async"
processing_ttl = "2s"
retry_backoff = { initial = "50ms", max = "200ms" }"#;

async fn admin(gateway: &TestGateway, method: Method, path: &str) -> Answer {
    request(method, &gateway.admin_url(path), Some(ADMIN_TOKEN)).await
}

/// A reload of `text` on the running gateway, as SIGHUP does.
fn reload(gateway: &TestGateway, text: &str) {
    let needs_restart = gateway.reloader.apply(&parse_config(text));
    assert_eq!(needs_restart, Vec::<String>::new(), "all of it is live");
}

/// Whether the record of `id` reaches `state` within a few seconds (a
/// store that does not answer yet — it is restarting — is asked again).
async fn reaches(gateway: &TestGateway, id: &str, state: &str) -> bool {
    let store = &gateway.store;
    let key = store.key("hook", id);
    eventually(Duration::from_secs(8), || async {
        store
            .records()
            .get(&key)
            .await
            .is_ok_and(|record| record.is_some_and(|record| record.state.as_str() == state))
    })
    .await
}

/// A failed sync event whose route is reloaded to async: the sender's retry
/// is accepted (not "replayed") and the workers deliver it.
async fn a_failed_event_reloaded_to_async_is_delivered(backend: Backend) {
    let (upstream, healthy) = Upstream::flaky().await;
    let sync = config_text(&upstream.url("/hook"), &backend, "", "");
    let gateway = TestGateway::start(&sync).await;
    let (sender, url, body) = (Sender::new(), gateway.url("/hook"), event("evt_mode"));
    let refused = sender.deliver(&url, &body).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reaches(&gateway, "evt_mode", "failed").await);

    let to_async = sync.replace(
        "upstream_timeout = \"5s\"",
        &format!("upstream_timeout = \"5s\"\n{ASYNC}"),
    );
    reload(&gateway, &to_async);
    healthy.store(true, Ordering::SeqCst);
    let retry = sender.deliver(&url, &body).await;
    assert_eq!(retry.status, StatusCode::ACCEPTED);
    assert!(
        !retry.replayed(),
        "a failed event is accepted anew, not replayed"
    );
    assert!(reaches(&gateway, "evt_mode", "completed").await);
    assert_eq!(
        upstream.count("evt_mode"),
        2,
        "the refused call and the delivery"
    );
    gateway.shutdown().await;
}

crate::on_backends!(a_failed_event_reloaded_to_async_is_delivered: [memory, redis]);

/// Accepted events still queued when their route is reloaded to sync are
/// delivered all the same: the queue owes them.
#[tokio::test]
async fn an_async_route_reloaded_to_sync_still_delivers_its_queue() {
    let (upstream, healthy) = Upstream::flaky().await;
    let route = format!("{ASYNC}\nmax_attempts = 0");
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, &route, "");
    let gateway = TestGateway::start(&text).await;
    let ids: Vec<String> = (0..3).map(|i| format!("evt_queued_{i}")).collect();
    accept_all(&gateway.url("/hook"), &ids).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            ids.iter().all(|id| upstream.count(id) >= 1)
        })
        .await,
        "each refused at least once"
    );
    reload(&gateway, &text.replace(&route, ""));
    healthy.store(true, Ordering::SeqCst);
    for id in &ids {
        assert!(reaches(&gateway, id, "completed").await, "{id} stranded");
    }
    gateway.shutdown().await;
}

/// The hybrid's calls take the route's `max_in_flight` places like the
/// workers': a burst of 8 with `max_in_flight = 2` never has more than two
/// calls at the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hybrid_keeps_to_max_in_flight() {
    let delay = Duration::from_millis(600);
    let upstream = Upstream::with(move |seen| Plan {
        delay,
        ..ok_plan(seen)
    })
    .await;
    let route = format!("{ASYNC}\nrespond_within = \"2s\"\nmax_in_flight = 2");
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, &route, "");
    let gateway = TestGateway::start(&text).await;
    let ids: Vec<String> = (0..8).map(|i| format!("evt_burst_{i}")).collect();
    let sends: Vec<_> = ids
        .iter()
        .map(|id| {
            let (url, body) = (gateway.url("/hook"), event(id));
            tokio::spawn(async move { Sender::new().deliver(&url, &body).await })
        })
        .collect();
    for send in sends {
        let answer = send.await.unwrap();
        assert!(answer.status.is_success(), "{:?}", answer.json());
    }
    assert!(upstream.all_reached(&ids, Duration::from_secs(15)).await);
    let arrivals: Vec<_> = upstream.seen().iter().map(|seen| seen.at).collect();
    // A call lasts `delay`: those that arrived within less than that of
    // each other ran at once.
    let at_once = arrivals
        .iter()
        .map(|first| {
            (arrivals.iter())
                .filter(|at| **at >= *first && at.duration_since(*first) < delay / 2)
                .count()
        })
        .max()
        .unwrap();
    assert!(
        at_once <= 2,
        "{at_once} calls at once under max_in_flight = 2"
    );
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id} once");
    }
    gateway.shutdown().await;
}

/// An operator's redelivery runs to its end in the gateway when its caller
/// hangs up mid-call (a CLI timeout, a closed console tab).
#[tokio::test]
async fn a_redelivery_outlives_its_caller() {
    let slow = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&slow);
    let upstream = Upstream::with(move |seen| match switch.load(Ordering::SeqCst) {
        true => Plan {
            delay: Duration::from_millis(800),
            ..ok_plan(seen)
        },
        false => Plan {
            status: StatusCode::SERVICE_UNAVAILABLE,
            ..ok_plan(seen)
        },
    })
    .await;
    let text = with_admin(
        &config_text(&upstream.url("/hook"), &Backend::Memory, "", ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let refused = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_hangup"))
        .await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    slow.store(true, Ordering::SeqCst);
    let call = admin(
        &gateway,
        Method::POST,
        "/admin/routes/hook/keys/evt_hangup/redeliver",
    );
    let hung_up = tokio::time::timeout(Duration::from_millis(200), call).await;
    assert!(
        hung_up.is_err(),
        "the caller left before the upstream answered"
    );
    assert!(reaches(&gateway, "evt_hangup", "completed").await);
    assert_eq!(upstream.count("evt_hangup"), 2);
    gateway.shutdown().await;
}

/// An operator's failed redelivery of a failed sync event leaves it failed:
/// it does not spend the sender's last attempt into a dead letter, and the
/// sender's next retry is forwarded.
#[tokio::test]
async fn an_operators_failure_never_spends_a_senders_retries() {
    let (upstream, healthy) = Upstream::flaky().await;
    let text = with_admin(
        &config_text(
            &upstream.url("/hook"),
            &Backend::Memory,
            "max_attempts = 2",
            "",
        ),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let (sender, url, body) = (Sender::new(), gateway.url("/hook"), event("evt_spent"));
    assert_eq!(
        sender.deliver(&url, &body).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let redelivered = admin(
        &gateway,
        Method::POST,
        "/admin/routes/hook/keys/evt_spent/redeliver",
    )
    .await;
    assert_eq!(
        redelivered.status,
        StatusCode::OK,
        "{:?}",
        redelivered.json()
    );
    assert_eq!(redelivered.json()["state"], "failed");
    healthy.store(true, Ordering::SeqCst);
    let retry = sender.deliver(&url, &body).await;
    assert_eq!(retry.status, StatusCode::OK, "{:?}", retry.json());
    assert_eq!(upstream.count("evt_spent"), 3);
    gateway.shutdown().await;
}

/// A pause made while a redrive runs holds it: nothing reaches the upstream
/// until the route is resumed, then the rest is delivered.
#[tokio::test]
async fn a_running_redrive_keeps_to_a_later_pause() {
    let (upstream, healthy) = Upstream::flaky().await;
    let text = with_admin(
        &config_text(
            &upstream.url("/hook"),
            &Backend::Memory,
            "max_attempts = 1",
            "",
        ),
        true,
    );
    let gateway = Arc::new(TestGateway::start(&text).await);
    let ids: Vec<String> = (0..4).map(|i| format!("evt_redrive_{i}")).collect();
    for id in &ids {
        Sender::new()
            .deliver(&gateway.url("/hook"), &event(id))
            .await;
        assert!(reaches(&gateway, id, "dead").await);
    }
    healthy.store(true, Ordering::SeqCst);
    let redrive = {
        let gateway = Arc::clone(&gateway);
        tokio::spawn(async move {
            admin(
                &gateway,
                Method::POST,
                "/admin/routes/hook/dead-letters/redeliver?rate=2",
            )
            .await
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || ready(
            upstream.total() > ids.len()
        ))
        .await
    );
    let paused = gateway.control("hook", "pause", "by=test").await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.json());
    let at_pause = upstream.total();
    // The redrive says the pause holds it.
    let held = eventually(Duration::from_secs(5), || async {
        let bulks = admin(&gateway, Method::GET, "/admin/bulk").await.json();
        bulks["bulk"][0]["waiting_on"] == "route_paused"
    })
    .await;
    assert!(held, "the redrive never waited for the pause");
    assert!(
        upstream.total() <= at_pause + 1,
        "the redrive went on through the pause: {at_pause} -> {}",
        upstream.total()
    );
    assert!(!redrive.is_finished(), "it waits, not stops");
    gateway.control("hook", "resume", "").await;
    let done = redrive.await.unwrap();
    assert_eq!(done.json()["completed"], ids.len(), "{:?}", done.json());
    for id in &ids {
        assert_eq!(upstream.count(id), 2, "{id}: refused once, redriven once");
    }
}

/// A Redis restart while the upstream works: the sender gets the upstream's
/// answer at once, the recording finishes once Redis is back (within the
/// lease), and the retry is replayed — the upstream sees the event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_restart_mid_recording_forwards_nothing_twice() {
    let Some(mut redis) = RedisServer::start_with(
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            "/tmp",
        ],
        None,
    )
    .await
    else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(700),
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Redis(redis.url()),
        "processing_ttl = \"10s\"",
        "",
    );
    let gateway = TestGateway::start(&text).await;
    let (url, body) = (gateway.url("/hook"), event("evt_outage"));
    let first = {
        let (url, body) = (url.clone(), body.clone());
        tokio::spawn(async move { Sender::new().deliver(&url, &body).await })
    };
    assert!(eventually(Duration::from_secs(5), || ready(upstream.total() == 1)).await);
    redis.kill();
    let answered = first.await.unwrap();
    assert_eq!(
        answered.status,
        StatusCode::OK,
        "answered while the store is down"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.restart().await;
    assert!(reaches(&gateway, "evt_outage", "completed").await);
    let retry = Sender::new().deliver(&url, &body).await;
    assert!(retry.replayed(), "{:?}", retry.json());
    assert_eq!(upstream.count("evt_outage"), 1);
    gateway.shutdown().await;
}

/// Two async routes sharing a scope share one queue, and each event is
/// called by the route that accepted it under that route's own controls:
/// a pause of one holds the queue (before, the other route's workers
/// delivered the paused route's events to its upstream).
#[tokio::test]
async fn a_paused_route_sharing_a_scope_is_not_delivered_by_its_sibling() {
    let paused_upstream = Upstream::start().await;
    let sibling_upstream = Upstream::start().await;
    let route = format!("{ASYNC}\nscope = \"shared\"");
    let text = with_admin(
        &config_text(&paused_upstream.url("/hook"), &Backend::Memory, &route, ""),
        true,
    );
    let routes_at = text.find("[[routes]]").unwrap();
    let sibling = text[routes_at..]
        .replace("name = \"hook\"", "name = \"sibling\"")
        .replace("path = \"/hook\"", "path = \"/sibling\"")
        .replace(
            &paused_upstream.url("/hook"),
            &sibling_upstream.url("/sibling"),
        );
    let text = format!("{text}\n{sibling}");
    let gateway = TestGateway::start(&text).await;
    let paused = gateway.control("hook", "pause", "by=test").await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.json());

    let ids: Vec<String> = (0..3).map(|i| format!("evt_shared_{i}")).collect();
    accept_all(&gateway.url("/hook"), &ids).await;
    accept_all(&gateway.url("/sibling"), &["evt_sibling".to_owned()]).await;
    gateway.worker_passes(4).await;
    assert_eq!(
        paused_upstream.total(),
        0,
        "a paused route's events were delivered"
    );
    assert_eq!(
        sibling_upstream.count("evt_shared_0"),
        0,
        "to the wrong upstream"
    );

    gateway.control("hook", "resume", "").await;
    assert!(
        paused_upstream
            .all_reached(&ids, Duration::from_secs(8))
            .await
    );
    assert!(
        sibling_upstream
            .all_reached(&["evt_sibling".to_owned()], Duration::from_secs(8))
            .await
    );
    for id in &ids {
        assert_eq!(paused_upstream.count(id), 1, "{id} once, to its own route");
        assert_eq!(sibling_upstream.count(id), 0);
    }
    gateway.shutdown().await;
}

/// An upstream that refuses until `slow` is set, then answers after 3 s.
async fn refusing_then_slow() -> (Upstream, Arc<AtomicBool>) {
    let slow = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&slow);
    let upstream = Upstream::with(move |seen| match switch.load(Ordering::SeqCst) {
        true => Plan {
            delay: Duration::from_secs(3),
            ..ok_plan(seen)
        },
        false => Plan {
            status: StatusCode::SERVICE_UNAVAILABLE,
            ..ok_plan(seen)
        },
    })
    .await;
    (upstream, slow)
}

/// SIGTERM during an operator's redelivery of an accepted dead letter: the
/// drain releases the claim and the event goes back to its queue (before,
/// the redelivery's claim had dropped the queue's duty and the release left
/// it failed for good).
#[tokio::test]
async fn sigterm_during_an_async_redelivery_puts_the_event_back_in_its_queue() {
    let (upstream, slow) = refusing_then_slow().await;
    let route = format!("{ASYNC}\nmax_attempts = 1");
    let text = with_admin(
        &config_text(&upstream.url("/hook"), &Backend::Memory, &route, ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    accept_all(&gateway.url("/hook"), &["evt_term".to_owned()]).await;
    assert!(reaches(&gateway, "evt_term", "dead").await);
    slow.store(true, Ordering::SeqCst);
    let url = gateway.admin_url("/admin/routes/hook/keys/evt_term/redeliver");
    let redelivery =
        tokio::spawn(async move { request(Method::POST, &url, Some(ADMIN_TOKEN)).await });
    assert!(
        eventually(Duration::from_secs(5), || ready(
            upstream.count("evt_term") == 2
        ))
        .await
    );
    let store = Arc::clone(&gateway.store);
    gateway.shutdown().await; // shutdown_grace 2 s < the 3 s call
    redelivery.abort();

    let record = store
        .records()
        .get(&store.key("hook", "evt_term"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state.as_str(), "queued", "stranded: {record:?}");
    assert!(record.next_attempt_ms.is_some(), "due again");
}

/// A worker's lapsed lease is taken up by one entrance at a time: the
/// gateway's workers and an operator's redelivery race for it, and
/// whichever wins, the other stays out until it is done — the upstream is
/// called once (before, on Redis, a redelivery that won kept the lapsed due
/// time and a worker called the upstream beside it).
async fn no_worker_beside_a_live_redelivery(backend: Backend) {
    let (upstream, slow) = refusing_then_slow().await;
    let route = format!("{ASYNC}\nmax_attempts = 0");
    let text = with_admin(
        &config_text(&upstream.url("/hook"), &backend, &route, ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    gateway.control("hook", "pause", "by=test").await;
    accept_all(&gateway.url("/hook"), &["evt_beside".to_owned()]).await;
    // A worker elsewhere leases it and dies: its lease lapses after 300 ms.
    let store = &gateway.store;
    let leased = store
        .queue()
        .lease_due("hook", 1, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(leased.len(), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    slow.store(true, Ordering::SeqCst);
    gateway.control("hook", "resume", "").await;
    let path = "/admin/routes/hook/keys/evt_beside/redeliver";
    let redelivered = admin(&gateway, Method::POST, path).await;
    assert!(
        [StatusCode::OK, StatusCode::CONFLICT].contains(&redelivered.status),
        "{:?}",
        redelivered.json()
    );
    assert!(reaches(&gateway, "evt_beside", "completed").await);
    // The workers passed every 250 ms throughout the 3 s call.
    assert_eq!(
        upstream.count("evt_beside"),
        1,
        "two entrances called at once"
    );
    gateway.shutdown().await;
}

crate::on_backends!(no_worker_beside_a_live_redelivery: [memory, redis]);

/// A sender that hangs up while its delivery is at the upstream does not
/// cancel it: the stages from the claim on run in a task of their own (only
/// reading and a replay from the cache run on the connection's task). The
/// call completes and is recorded, and the sender's retry is replayed.
#[tokio::test]
async fn a_delivery_outlives_its_sender_hanging_up() {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(800),
        ..ok_plan(seen)
    })
    .await;
    let gateway = TestGateway::start(&config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        "",
        "",
    ))
    .await;
    let (sender, url, body) = (Sender::new(), gateway.url("/hook"), event("evt_gone"));
    let call = sender.deliver(&url, &body);
    let hung_up = tokio::time::timeout(Duration::from_millis(200), call).await;
    assert!(
        hung_up.is_err(),
        "the sender left before the upstream answered"
    );
    assert!(reaches(&gateway, "evt_gone", "completed").await);
    let retry = sender.deliver(&url, &body).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert!(retry.replayed(), "Idempotent-Replayed: true");
    assert_eq!(upstream.count("evt_gone"), 1);
    gateway.shutdown().await;
}
