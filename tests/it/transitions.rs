//! The rows of docs/operations/fleets.md, "When a route changes shape", that no
//! other file reproduces: async ↔ hybrid, ordering turned on, and a
//! destination renamed. Each reloads a route holding events and counts,
//! at the upstream, that every one is delivered exactly once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;

use crate::ordering::entity_event;
use crate::support::*;

/// How long the upstream takes over each event in the ordering test.
const WORK: Duration = Duration::from_millis(25);

/// A paused async route's backlog, reloaded hybrid: the backlog is
/// delivered once each by the workers, and a new event is answered with
/// the upstream's own answer within `respond_within`; reloaded async
/// again, a new event is accepted 202 and delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_and_hybrid_swap_without_losing_or_repeating_an_event() {
    let upstream = Upstream::start().await;
    let route = "delivery = \"async\"\nretry_backoff = { initial = \"50ms\", max = \"100ms\" }\n";
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, route, ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    let paused = gateway.control("hook", "pause", "by=test").await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.json());
    for id in ["evt_a1", "evt_a2", "evt_a3"] {
        assert_eq!(
            sender.deliver(&url, &event(id)).await.status,
            StatusCode::ACCEPTED
        );
    }

    let hybrid = text.replace(route, &format!("{route}respond_within = \"2s\"\n"));
    assert!(gateway.reloader.apply(&parse_config(&hybrid)).is_empty());
    gateway.control("hook", "resume", "").await;
    let backlog: Vec<String> = ["evt_a1", "evt_a2", "evt_a3"].map(String::from).to_vec();
    assert!(
        upstream
            .all_reached(&backlog, Duration::from_secs(10))
            .await
    );
    let answered = sender.deliver(&url, &event("evt_h1")).await;
    assert_eq!(answered.status, StatusCode::OK, "the upstream's own answer");

    assert!(gateway.reloader.apply(&parse_config(&text)).is_empty());
    let accepted = sender.deliver(&url, &event("evt_a4")).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    assert!(
        upstream
            .all_reached(&["evt_a4".into()], Duration::from_secs(10))
            .await
    );
    // The duplicates of each: answered from the record, never forwarded.
    for id in ["evt_a1", "evt_h1", "evt_a4"] {
        let again = sender.deliver_until_settled(&url, &event(id)).await;
        assert!(again.status.is_success(), "{id}: {}", again.status);
    }
    for id in ["evt_a1", "evt_a2", "evt_a3", "evt_h1", "evt_a4"] {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    gateway.shutdown().await;
}

/// Events accepted before `order_by` was added have no place in their
/// entity's order: they are delivered unordered beside the new events,
/// which reach the upstream one at a time, in order. Each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_turned_on_delivers_the_earlier_backlog_beside_the_ordered_events() {
    let upstream = Upstream::with(|seen| Plan {
        delay: WORK,
        ..ok_plan(seen)
    })
    .await;
    let route = "delivery = \"async\"\nmax_in_flight = 32\n\
                 retry_backoff = { initial = \"50ms\", max = \"100ms\" }\n";
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, route, ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    let paused = gateway.control("hook", "pause", "by=test").await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.json());
    for i in 0..3 {
        let body = entity_event(&format!("evt_old{i}"), "sub_1", 1);
        assert_eq!(
            sender.deliver(&url, &body).await.status,
            StatusCode::ACCEPTED
        );
    }

    let ordered = text.replace(
        route,
        &format!("{route}order_by = \"json:/data/object/id\"\n"),
    );
    assert!(gateway.reloader.apply(&parse_config(&ordered)).is_empty());
    for i in 0..4 {
        let body = entity_event(&format!("evt_new{i}"), "sub_1", 2);
        assert_eq!(
            sender.deliver(&url, &body).await.status,
            StatusCode::ACCEPTED
        );
    }
    gateway.control("hook", "resume", "").await;

    let old: Vec<String> = (0..3).map(|i| format!("evt_old{i}")).collect();
    let new: Vec<String> = (0..4).map(|i| format!("evt_new{i}")).collect();
    assert!(
        upstream.all_reached(&old, Duration::from_secs(10)).await,
        "the backlog"
    );
    assert!(
        upstream.all_reached(&new, Duration::from_secs(10)).await,
        "the new events"
    );
    let mut arrivals: Vec<_> = (upstream.seen().into_iter())
        .filter(|seen| seen.key().starts_with("evt_new"))
        .map(|seen| (seen.key(), seen.at))
        .collect();
    arrivals.sort_by_key(|(_, at)| *at);
    for pair in arrivals.windows(2) {
        assert!(
            pair[1].1 - pair[0].1 >= WORK,
            "{} arrived while {} was in flight",
            pair[1].0,
            pair[0].0
        );
    }
    let order: Vec<String> = arrivals.into_iter().map(|(key, _)| key).collect();
    assert_eq!(order, new, "the ordered events in the order accepted");
    for id in old.iter().chain(&new) {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    gateway.shutdown().await;
}

/// A destination renamed is the old one retired and a new one added: the
/// retired name delivers the event it was handed before the reload, once;
/// a later event goes to the new name only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_destination_delivers_what_it_held_and_the_new_name_takes_the_rest() {
    let ((crm, crm_up), customers) = (Upstream::flaky().await, Upstream::start().await);
    let route = "delivery = \"async\"\nretry_backoff = { initial = \"50ms\", max = \"200ms\" }\n";
    let text = config_text("http://removed", &Backend::Memory, route, "")
        .replace("upstream = \"http://removed\"\n", "");
    let destination = |name: &str, upstream: &Upstream| {
        format!(
            "\n[[routes.destinations]]\nname = \"{name}\"\nupstream = \"{}\"\n",
            upstream.url("/c")
        )
    };
    let before = with_admin(&format!("{text}{}", destination("crm", &crm)), true);
    let gateway = TestGateway::start(&before).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    // The crm refuses evt_1 for now: it waits, queued, at `hook/crm`.
    assert_eq!(
        sender.deliver(&url, &event("evt_1")).await.status,
        StatusCode::ACCEPTED
    );
    assert!(
        crm.all_reached(&["evt_1".into()], Duration::from_secs(10))
            .await
    );

    let after = with_admin(
        &format!("{text}{}", destination("customers", &customers)),
        true,
    );
    assert!(gateway.reloader.apply(&parse_config(&after)).is_empty());
    assert_eq!(
        sender.deliver(&url, &event("evt_2")).await.status,
        StatusCode::ACCEPTED
    );
    assert!(
        customers
            .all_reached(&["evt_2".into()], Duration::from_secs(10))
            .await
    );

    crm_up.store(true, Ordering::SeqCst);
    let delivered = eventually(Duration::from_secs(10), || async {
        let record = gateway.record("hook/crm", "evt_1").await;
        record.is_some_and(|record| record.state.as_str() == "completed")
    });
    assert!(delivered.await, "the retired name delivered what it held");
    assert_eq!(crm.count("evt_2"), 0, "the old name takes no new event");
    assert_eq!(
        customers.count("evt_1"),
        0,
        "the new name is not handed the old event"
    );
    assert_eq!(customers.count("evt_2"), 1);
    gateway.shutdown().await;
}
