//! Features that compose (docs/operations/fleets.md, "When a route changes
//! shape"): a destination of an ordered route keeps its order and its
//! stale guard; a backlog accepted in order drains in order after a reload
//! turned its route sync; a dead letter of a route that gained
//! destinations can still be redelivered and redriven.

use std::time::Duration;

use hookgate::store::RecordState;
use http::{Method, StatusCode};

use crate::ordering::{entity_event, ordered_route};
use crate::support::*;

/// How long the upstream takes over each event: an entity's next event
/// cannot arrive sooner after its previous one.
const WORK: Duration = Duration::from_millis(25);

async fn slow_upstream() -> Upstream {
    Upstream::with(|seen| Plan {
        delay: WORK,
        ..ok_plan(seen)
    })
    .await
}

/// Keys of what `upstream` received, in arrival order; panics when two
/// arrived closer than [`WORK`] (one was sent while the other was in
/// flight).
fn one_at_a_time(upstream: &Upstream) -> Vec<String> {
    let mut seen: Vec<_> = (upstream.seen().into_iter())
        .map(|seen| (seen.key(), seen.at))
        .collect();
    seen.sort_by_key(|(_, at)| *at);
    for pair in seen.windows(2) {
        assert!(
            pair[1].1 - pair[0].1 >= WORK,
            "{} arrived while {} was in flight: {:?}",
            pair[1].0,
            pair[0].0,
            seen.iter().map(|(key, _)| key).collect::<Vec<_>>()
        );
    }
    seen.into_iter().map(|(key, _)| key).collect()
}

/// `evt_0` … `evt_{n-1}` of entity `sub_1`, created in that order.
fn in_order(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("evt_{i}")).collect()
}

/// An ordered async route (`order_by` + `stale_by`) whose one consumer is
/// the destination `ledger`.
fn ordered_with_a_destination(ledger: &Upstream, backend: &Backend) -> String {
    let text = ordered_route(ledger, backend, "stale_by = \"json:/created\"")
        .replace(&format!("upstream = \"{}\"\n", ledger.url("/")), "");
    with_admin(
        &format!(
            "{text}\n[[routes.destinations]]\nname = \"ledger\"\nupstream = \"{}\"\n",
            ledger.url("/ledger")
        ),
        true,
    )
}

/// Five events of one entity sent back to back reach the destination one
/// at a time, in order; a sixth, older than what was delivered, is stale
/// there and never forwarded.
async fn a_destination_keeps_the_routes_order(backend: Backend) {
    let ledger = slow_upstream().await;
    let gateway = TestGateway::start(&ordered_with_a_destination(&ledger, &backend)).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    for i in 0..5 {
        let body = entity_event(&format!("evt_{i}"), "sub_1", 100 + i as u64);
        let sent = sender.deliver_until_settled(&url, &body).await;
        assert_eq!(sent.status, StatusCode::ACCEPTED);
    }
    assert!(
        ledger
            .all_reached(&in_order(5), Duration::from_secs(30))
            .await
    );
    assert_eq!(one_at_a_time(&ledger), in_order(5), "in the order sent");

    let late = entity_event("evt_old", "sub_1", 1);
    let sent = sender.deliver_until_settled(&url, &late).await;
    assert_eq!(sent.status, StatusCode::ACCEPTED);
    let stale = eventually(Duration::from_secs(10), || async {
        let record = gateway.record("hook/ledger", "evt_old").await;
        record.map(|record| record.state) == Some(RecordState::Stale)
    });
    assert!(
        stale.await,
        "{:?}",
        gateway.record("hook/ledger", "evt_old").await
    );
    assert_eq!(ledger.count("evt_old"), 0, "never forwarded");
    for id in in_order(5) {
        assert_eq!(ledger.count(&id), 1, "{id}");
    }
    gateway.shutdown().await;
}

crate::on_backends!(a_destination_keeps_the_routes_order: [memory, embedded, redis, postgres]);

/// The ordered async route of `text`, made sync.
fn as_sync(text: &str) -> String {
    (text.replace("delivery = \"async\"\n", ""))
        .replace("order_by = \"json:/data/object/id\"\n", "")
        .replace("max_in_flight = 32\n", "")
        .replace(
            "retry_backoff = { initial = \"50ms\", max = \"100ms\" }\n",
            "",
        )
}

/// A backlog accepted by an ordered async route while it was paused, then
/// the route reloaded sync: the backlog drains one event at a time, in the
/// order accepted.
async fn a_backlog_drains_in_order_after_the_route_turns_sync(backend: Backend) {
    let upstream = slow_upstream().await;
    let text = with_admin(&ordered_route(&upstream, &backend, ""), true);
    let gateway = TestGateway::start(&text).await;
    let paused = gateway.control("hook", "pause", "by=test").await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.json());
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    for i in 0..6 {
        let body = entity_event(&format!("evt_{i}"), "sub_1", 1);
        let sent = sender.deliver_until_settled(&url, &body).await;
        assert_eq!(sent.status, StatusCode::ACCEPTED);
    }
    let needs_restart = gateway.reloader.apply(&parse_config(&as_sync(&text)));
    assert_eq!(needs_restart, Vec::<String>::new());
    gateway.control("hook", "resume", "").await;
    assert!(
        upstream
            .all_reached(&in_order(6), Duration::from_secs(30))
            .await
    );
    assert_eq!(
        one_at_a_time(&upstream),
        in_order(6),
        "in the order accepted"
    );
    gateway.shutdown().await;
}

/// The same across a restart: the gateway that starts on the changed
/// file has never seen the route ordered, and still drains its backlog in
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_drains_in_order_after_a_restart_on_a_sync_route() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = slow_upstream().await;
    let backend = Backend::Redis(redis.url());
    let text = with_admin(&ordered_route(&upstream, &backend, ""), true);
    let gateway = TestGateway::start(&text).await;
    gateway.control("hook", "pause", "by=test").await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    for i in 0..6 {
        let body = entity_event(&format!("evt_{i}"), "sub_1", 1);
        let sent = sender.deliver_until_settled(&url, &body).await;
        assert_eq!(sent.status, StatusCode::ACCEPTED);
    }
    gateway.shutdown().await;
    let gateway = TestGateway::start(&as_sync(&text)).await;
    gateway.control("hook", "resume", "").await;
    assert!(
        upstream
            .all_reached(&in_order(6), Duration::from_secs(30))
            .await
    );
    assert_eq!(
        one_at_a_time(&upstream),
        in_order(6),
        "in the order accepted"
    );
    // Found by the first pass, not given back by an unordered one.
    for id in in_order(6) {
        let record = gateway.record("hook", &id).await.unwrap();
        assert_eq!(record.attempts, 1, "{id}: {record:?}");
    }
    gateway.shutdown().await;
}

crate::on_backends!(a_backlog_drains_in_order_after_the_route_turns_sync: [memory, embedded, redis]);

/// Dead letters of a route with one upstream; the route then gains
/// destinations. A redelivery hands the event out (judged by the
/// destinations' filters now), a redrive does the same to the rest, and
/// each destination gets each event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_of_a_route_that_gained_destinations_is_handed_out() {
    let ((old, _), (billing, crm)) = (
        Upstream::flaky().await,
        (Upstream::start().await, Upstream::start().await),
    );
    let route = "delivery = \"async\"\nmax_attempts = 1\n\
                 retry_backoff = { initial = \"50ms\", max = \"100ms\" }";
    let text = with_admin(
        &config_text(&old.url("/old"), &Backend::Memory, route, ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    for id in ["evt_a", "evt_b", "evt_c"] {
        let body = format!(r#"{{"id":"{id}","type":"invoice.paid"}}"#);
        let sent = sender.deliver(&gateway.url("/hook"), &body).await;
        assert_eq!(sent.status, StatusCode::ACCEPTED);
    }
    for id in ["evt_a", "evt_b", "evt_c"] {
        let dead = eventually(Duration::from_secs(10), || async {
            let record = gateway.record("hook", id).await;
            record.map(|record| record.state) == Some(RecordState::Dead)
        });
        assert!(dead.await, "{id}: {:?}", gateway.record("hook", id).await);
    }

    let destinations = format!(
        "{}\n[[routes.destinations]]\nname = \"billing\"\nupstream = \"{}\"\n\
         filter = {{ \"json:/type\" = \"invoice.*\" }}\n\
         [[routes.destinations]]\nname = \"crm\"\nupstream = \"{}\"\n\
         filter = {{ \"json:/type\" = \"customer.*\" }}\n",
        text.replace(&format!("upstream = \"{}\"\n", old.url("/old")), ""),
        billing.url("/b"),
        crm.url("/c"),
    );
    let needs_restart = gateway.reloader.apply(&parse_config(&destinations));
    assert_eq!(needs_restart, Vec::<String>::new());

    // One redelivered by key: handed to the destination whose filter
    // takes it.
    let url = gateway.admin_url("/admin/routes/hook/keys/evt_a/redeliver");
    let sent = request(Method::POST, &url, Some(ADMIN_TOKEN)).await;
    assert!(sent.status.is_success(), "{} {}", sent.status, sent.json());
    assert!(
        billing
            .all_reached(&["evt_a".into()], Duration::from_secs(10))
            .await
    );
    // One replayed: a new event, handed out under its new key.
    let url = gateway.admin_url("/admin/routes/hook/keys/evt_b/replay");
    let replayed = request(Method::POST, &url, Some(ADMIN_TOKEN)).await;
    assert!(
        replayed.status.is_success(),
        "{} {}",
        replayed.status,
        replayed.json()
    );
    assert!(
        billing
            .all_reached(&["evt_b.replay-1".into()], Duration::from_secs(10))
            .await
    );
    // The rest redriven.
    let redrive = events_cli(&gateway, &["redrive", "hook"]);
    let said = String::from_utf8_lossy(&redrive.stdout).into_owned();
    assert!(
        redrive.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&redrive.stderr)
    );
    let owed = ["evt_a".into(), "evt_b".into(), "evt_c".into()];
    assert!(billing.all_reached(&owed, Duration::from_secs(10)).await);
    let handed = eventually(Duration::from_secs(10), || async {
        let mut all = true;
        for id in ["evt_a", "evt_b", "evt_c"] {
            let record = gateway.record("hook", id).await;
            all &= record.map(|record| record.state) == Some(RecordState::Completed);
        }
        all
    });
    assert!(handed.await, "every dead letter handed out");
    for id in ["evt_a", "evt_b", "evt_c", "evt_b.replay-1"] {
        assert_eq!(billing.count(id), 1, "{id} at billing");
        assert_eq!(crm.count(id), 0, "{id} is no customer event");
    }
    // Handed out, the event's own record is its destinations': sending it
    // again names one.
    let url = gateway.admin_url("/admin/routes/hook/keys/evt_a/redeliver");
    let again = request(Method::POST, &url, Some(ADMIN_TOKEN)).await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST);
    assert_eq!(again.json()["error"]["code"], "destination_required");
    gateway.shutdown().await;
}

/// A hybrid call that outlives `respond_within` and then fails: the sender
/// was answered 202, and the attempt is still counted — in the async
/// family, and in the family every entrance counts in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hybrid_attempt_that_fails_after_the_202_is_counted() {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(400),
        status: StatusCode::SERVICE_UNAVAILABLE,
        ..ok_plan(seen)
    })
    .await;
    let route = "delivery = \"async\"\nrespond_within = \"100ms\"\nmax_attempts = 5\n\
                 retry_backoff = { initial = \"1h\", max = \"1h\" }";
    let text = with_admin(
        &config_text(&upstream.url("/hook"), &Backend::Memory, route, ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let sent = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_slow"))
        .await;
    assert_eq!(
        sent.status,
        StatusCode::ACCEPTED,
        "answered before the call ended"
    );
    let retrying = [("route", "hook"), ("result", "retrying")];
    let counted = eventually(Duration::from_secs(10), || async {
        let metrics = scrape(&gateway.admin_url("/metrics")).await;
        sample(&metrics, "hookgate_delivery_attempts_total", &retrying) == Some(1.0)
    });
    assert!(
        counted.await,
        "the hybrid's failed attempt is counted: {}",
        scrape(&gateway.admin_url("/metrics")).await
    );
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let by_entrance = [
        ("route", "hook"),
        ("entrance", "hybrid"),
        ("result", "retrying"),
    ];
    assert_eq!(
        sample(&metrics, "hookgate_attempts_total", &by_entrance),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(upstream.count("evt_slow"), 1);
    gateway.shutdown().await;
}
