//! Ordered delivery per entity (docs/guide/ordering.md, "Ordered delivery"), end to end:
//! a real upstream records when each event arrives, so the order within an
//! entity, and that an entity never has two events in flight, show as a
//! consumer would see them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hookgate::store::RecordState;
use http::{Method, StatusCode};

use crate::support::*;

/// How long the upstream takes over each event: an entity's next event
/// cannot arrive sooner after its previous one.
const WORK: Duration = Duration::from_millis(25);

/// An ordered async route on `backend`, with `extra` settings, and an
/// admin listener.
pub(crate) fn ordered_config(upstream: &Upstream, backend: &Backend, extra: &str) -> String {
    with_admin(&ordered_route(upstream, backend, extra), true)
}

pub(crate) fn ordered_route(upstream: &Upstream, backend: &Backend, extra: &str) -> String {
    let route = format!(
        "delivery = \"async\"\nmax_in_flight = 32\norder_by = \"json:/data/object/id\"\n\
         retry_backoff = {{ initial = \"50ms\", max = \"100ms\" }}\n{extra}"
    );
    config_text(&upstream.url("/"), backend, &route, "")
}

/// Event `id` of entity `entity`, created at `created` (Unix seconds).
pub(crate) fn entity_event(id: &str, entity: &str, created: u64) -> String {
    format!(
        r#"{{"id":"{id}","type":"customer.subscription.updated","created":{created},"data":{{"object":{{"id":"{entity}"}}}}}}"#
    )
}

/// An upstream that takes [`WORK`] over each event.
async fn slow_upstream() -> Upstream {
    Upstream::with(|seen| Plan {
        delay: WORK,
        ..ok_plan(seen)
    })
    .await
}

/// The events of entity `entity` as the upstream received them: their
/// keys, in arrival order, and when each arrived.
fn arrivals(upstream: &Upstream, entity: &str) -> Vec<(String, tokio::time::Instant)> {
    let mut seen: Vec<_> = (upstream.seen().into_iter())
        .filter(|seen| String::from_utf8_lossy(&seen.body).contains(&format!("\"{entity}\"")))
        .map(|seen| (seen.key(), seen.at))
        .collect();
    seen.sort_by_key(|(_, at)| *at);
    seen
}

/// How many entities, and events of each, the burst tests send.
const ENTITIES: usize = 20;
const ROUNDS: usize = 10;

/// Sends [`ENTITIES`] × [`ROUNDS`] events, each round a burst of one event
/// per entity at once, event `evt_{e}_{round}` of entity `sub_{e}` to
/// `url(round, e)`; `before(round)` runs before each round. Every one is
/// accepted (retried as a sender retries a 503).
async fn send_bursts(url: impl Fn(usize, usize) -> String, mut before: impl FnMut(usize)) {
    for round in 0..ROUNDS {
        before(round);
        let sends = (0..ENTITIES).map(|e| {
            let url = url(round, e);
            tokio::spawn(async move {
                let body = entity_event(&format!("evt_{e}_{round}"), &format!("sub_{e}"), 1);
                // As a sender does, again on 503: a loaded machine's store
                // may answer an acceptance late.
                (Sender::new().deliver_until_settled(&url, &body).await).status
            })
        });
        for sent in futures_util::future::join_all(sends).await {
            assert_eq!(sent.unwrap(), StatusCode::ACCEPTED);
        }
    }
}

/// Waits until every event [`send_bursts`] sent reached the upstream, then
/// checks each entity's: first arrivals in the order sent, and none while
/// the entity's previous was in flight. Returns every event's key.
async fn assert_each_entity_in_order(upstream: &Upstream, within: Duration) -> Vec<String> {
    let all: Vec<String> = (0..ENTITIES)
        .flat_map(|e| (0..ROUNDS).map(move |r| format!("evt_{e}_{r}")))
        .collect();
    if !upstream.all_reached(&all, within).await {
        let missing: Vec<&String> = (all.iter()).filter(|id| upstream.count(id) == 0).collect();
        panic!(
            "{} of {} delivered; never delivered: {missing:?}",
            all.len() - missing.len(),
            all.len()
        );
    }
    for e in 0..ENTITIES {
        let seen = arrivals(upstream, &format!("sub_{e}"));
        let mut firsts: Vec<&str> = Vec::new();
        for (key, _) in &seen {
            if !firsts.contains(&key.as_str()) {
                firsts.push(key);
            }
        }
        let sent: Vec<String> = (0..ROUNDS).map(|r| format!("evt_{e}_{r}")).collect();
        assert_eq!(firsts, sent, "sub_{e} in the order sent");
        for pair in seen.windows(2) {
            assert!(
                pair[1].1 - pair[0].1 >= WORK,
                "sub_{e}: {} arrived while {} was in flight",
                pair[1].0,
                pair[0].0
            );
        }
    }
    all
}

/// Bursts of one event per entity: every event is delivered once, each
/// entity's in the order sent and never two at a time, and different
/// entities at the same time.
async fn entities_are_delivered_in_order_one_at_a_time(backend: Backend, extra: &str) {
    let upstream = slow_upstream().await;
    let gateway = TestGateway::start(&ordered_config(&upstream, &backend, extra)).await;
    let url = gateway.url("/hook");
    send_bursts(|_, _| url.clone(), |_| ()).await;
    for id in assert_each_entity_in_order(&upstream, Duration::from_secs(30)).await {
        assert_eq!(upstream.count(&id), 1, "{id}");
    }
    let all_seen = upstream.seen();
    let overlapping = all_seen.iter().enumerate().any(|(i, a)| {
        all_seen[i + 1..].iter().any(|b| {
            let apart = if b.at > a.at {
                b.at - a.at
            } else {
                a.at - b.at
            };
            apart < WORK
        })
    });
    assert!(overlapping, "different entities are delivered at once");
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_are_delivered_in_order_on_the_memory_store() {
    entities_are_delivered_in_order_one_at_a_time(Backend::Memory, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_are_delivered_in_order_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    entities_are_delivered_in_order_one_at_a_time(embedded(&dir), "").await;
}

/// The default store, in `dir`.
pub(crate) fn embedded(dir: &tempfile::TempDir) -> Backend {
    Backend::Embedded(dir.path().join("hookgate.db"))
}

/// With `reorder_window`, a newer event sent first waits, and the older
/// one sent after it reaches the upstream first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reorder_window_lets_an_older_event_sent_late_go_first() {
    let upstream = Upstream::start().await;
    let extra = "stale_by = \"json:/created\"\nreorder_window = \"1s\"";
    let dir = tempfile::tempdir().unwrap();
    let gateway = TestGateway::start(&ordered_config(&upstream, &embedded(&dir), extra)).await;
    let sender = Sender::new();
    let newer = sender
        .deliver(
            &gateway.url("/hook"),
            &entity_event("evt_newer", "sub_1", 200),
        )
        .await;
    assert_eq!(newer.status, StatusCode::ACCEPTED);
    let older = sender
        .deliver(
            &gateway.url("/hook"),
            &entity_event("evt_older", "sub_1", 100),
        )
        .await;
    assert_eq!(older.status, StatusCode::ACCEPTED);
    let both = ["evt_older".to_owned(), "evt_newer".to_owned()];
    assert!(upstream.all_reached(&both, Duration::from_secs(10)).await);
    let keys: Vec<String> = (arrivals(&upstream, "sub_1").into_iter())
        .map(|(key, _)| key)
        .collect();
    assert_eq!(keys, both, "the older one first");
    gateway.shutdown().await;
}

/// With `stale_by`, an event older than one already delivered for its
/// entity is recorded `stale`, never forwarded, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_older_than_the_delivered_one_is_stale() {
    let upstream = Upstream::start().await;
    let extra = "stale_by = \"json:/created\"";
    let dir = tempfile::tempdir().unwrap();
    let gateway = TestGateway::start(&ordered_config(&upstream, &embedded(&dir), extra)).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    sender
        .deliver(&url, &entity_event("evt_new", "sub_1", 200))
        .await;
    assert!(
        upstream
            .all_reached(&["evt_new".into()], Duration::from_secs(10))
            .await
    );
    let late = sender
        .deliver(&url, &entity_event("evt_old", "sub_1", 100))
        .await;
    assert_eq!(
        late.status,
        StatusCode::ACCEPTED,
        "accepted: the sender stops"
    );
    let stale = eventually(Duration::from_secs(10), || async {
        gateway.record("hook", "evt_old").await.map(|r| r.state) == Some(RecordState::Stale)
    });
    assert!(stale.await, "{:?}", gateway.record("hook", "evt_old").await);
    assert_eq!(upstream.count("evt_old"), 0, "never forwarded");
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let counted = sample(
        &metrics,
        "hookgate_stale_events_total",
        &[("route", "hook")],
    );
    assert_eq!(counted, Some(1.0), "{metrics}");

    // Its duplicate is answered, and an operator can still send it on purpose.
    let again = sender
        .deliver(&url, &entity_event("evt_old", "sub_1", 100))
        .await;
    assert!(again.status.is_success(), "{}", again.status);
    let sent = request(
        Method::POST,
        &gateway.admin_url("/admin/routes/hook/keys/evt_old/redeliver"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.json());
    assert_eq!(upstream.count("evt_old"), 1);
    gateway.shutdown().await;
}

/// An upstream that refuses `evt_poison` until `healed` is set.
pub(crate) async fn poisoned_upstream() -> (Upstream, Arc<AtomicBool>) {
    let healed = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&healed);
    let upstream = Upstream::with(move |seen| {
        let refused = seen.key() == "evt_poison" && !switch.load(Ordering::SeqCst);
        Plan {
            status: if refused {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            },
            ..ok_plan(seen)
        }
    })
    .await;
    (upstream, healed)
}

/// `evt_poison`, the first event of entity `sub_a`, sent and refused
/// until it is dead (the route dies after one attempt).
pub(crate) async fn dead_head(gateway: &TestGateway, sender: &Sender) {
    (sender.deliver(
        &gateway.url("/hook"),
        &entity_event("evt_poison", "sub_a", 1),
    ))
    .await;
    let dead = eventually(Duration::from_secs(10), || async {
        gateway.record("hook", "evt_poison").await.map(|r| r.state) == Some(RecordState::Dead)
    });
    assert!(dead.await);
}

/// A dead event with `on_blocked = "wait"` holds its entity's later events
/// (another entity's go on) until an operator redelivers it; then they
/// follow it in order. With `"skip"`, they go on at once.
async fn a_dead_event_and_its_entity(on_blocked: &str) {
    let extra = format!("max_attempts = 1\non_blocked = \"{on_blocked}\"");
    let (dir, (upstream, healed)) = (tempfile::tempdir().unwrap(), poisoned_upstream().await);
    let gateway = TestGateway::start(&ordered_config(&upstream, &embedded(&dir), &extra)).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    dead_head(&gateway, &sender).await;
    sender
        .deliver(&url, &entity_event("evt_a2", "sub_a", 2))
        .await;
    sender
        .deliver(&url, &entity_event("evt_b1", "sub_b", 1))
        .await;
    assert!(
        upstream
            .all_reached(&["evt_b1".into()], Duration::from_secs(10))
            .await
    );
    if on_blocked == "skip" {
        assert!(
            upstream
                .all_reached(&["evt_a2".into()], Duration::from_secs(10))
                .await
        );
        let blocked = blocked(&gateway).await;
        assert_eq!(blocked["on_blocked"], "skip");
        assert_eq!(blocked["blocked"], serde_json::json!([]));
        gateway.shutdown().await;
        return;
    }
    // Every pass since evt_b1 was accepted could have leased evt_a2.
    assert_eq!(upstream.count("evt_a2"), 0, "held behind the dead event");
    let waiting = gateway.record("hook", "evt_a2").await.unwrap();
    assert_eq!(waiting.state, RecordState::Queued);
    // The operator is told, and sees why: the entity, its dead event and
    // what waits behind it.
    let shown = blocked(&gateway).await;
    assert_eq!(shown["on_blocked"], "wait");
    let held = &shown["blocked"];
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{shown}");
    assert_eq!(
        (
            &held[0]["entity"],
            &held[0]["dead_event"],
            &held[0]["waiting"]
        ),
        (&"sub_a".into(), &"evt_poison".into(), &1.into())
    );
    let routes = gateway.admin_url("/admin/routes");
    let routes = request(Method::GET, &routes, Some(ADMIN_TOKEN)).await;
    assert_eq!(routes.json()["routes"][0]["blocked"], 1);
    assert_eq!(blocked_gauge(&gateway).await, Some(1.0));
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args([
            "routes",
            "blocked",
            "hook",
            "--admin",
            &gateway.admin_url(""),
        ])
        .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&cli.stdout);
    let row = table.lines().find(|line| line.starts_with("sub_a"));
    assert!(
        row.is_some_and(|row| row.contains("evt_poison") && row.ends_with('1')),
        "{table}"
    );

    healed.store(true, Ordering::SeqCst);
    let redelivered = request(
        Method::POST,
        &gateway.admin_url("/admin/routes/hook/keys/evt_poison/redeliver"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert!(redelivered.status.is_success(), "{}", redelivered.json());
    let both = ["evt_poison".to_owned(), "evt_a2".to_owned()];
    assert!(upstream.all_reached(&both, Duration::from_secs(10)).await);
    let keys: Vec<String> = (arrivals(&upstream, "sub_a").into_iter())
        .map(|(key, _)| key)
        .collect();
    assert_eq!(
        keys,
        ["evt_poison", "evt_poison", "evt_a2"],
        "in order once unblocked"
    );
    assert_eq!(blocked(&gateway).await["blocked"], serde_json::json!([]));
    assert_eq!(blocked_gauge(&gateway).await, Some(0.0));
    gateway.shutdown().await;
}

/// `GET /admin/routes/hook/blocked`.
async fn blocked(gateway: &TestGateway) -> serde_json::Value {
    let url = gateway.admin_url("/admin/routes/hook/blocked");
    let answer = request(Method::GET, &url, Some(ADMIN_TOKEN)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.json());
    answer.json()
}

/// `hookgate_blocked_entities` of the route, as scraped now.
async fn blocked_gauge(gateway: &TestGateway) -> Option<f64> {
    let text = scrape(&gateway.admin_url("/metrics")).await;
    let labels = [("route", "hook"), ("destination", "")];
    sample(&text, "hookgate_blocked_entities", &labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_event_holds_its_entity_until_redelivered() {
    a_dead_event_and_its_entity("wait").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_event_is_skipped_when_the_route_says_so() {
    a_dead_event_and_its_entity("skip").await;
}

/// Two gateways (the real binary) on one shared store, bursts spread over
/// both, and one gateway SIGKILLed halfway: every event is delivered, each
/// entity's in the order sent and never two at a time — an event in flight
/// at the kill is delivered again once its lease lapses (the crash
/// window), still before its entity's next.
async fn a_fleet_keeps_each_entitys_order_through_a_sigkill(backend: Backend) {
    let upstream = slow_upstream().await;
    let text = ordered_route(&upstream, &backend, "processing_ttl = \"1s\"");
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (path_a, port_a) = write_config(dir_a.path(), &text);
    let (path_b, port_b) = write_config(dir_b.path(), &text);
    let a = std::sync::Mutex::new(GatewayProcess::start(&path_a, port_a).await);
    let b = GatewayProcess::start(&path_b, port_b).await;
    let (url_a, url_b) = (a.lock().unwrap().url("/hook"), b.url("/hook"));
    send_bursts(
        |round, e| match (round < ROUNDS / 2, e % 2) {
            (true, 0) => url_a.clone(),
            _ => url_b.clone(),
        },
        |round| {
            if round == ROUNDS / 2 {
                a.lock().unwrap().stop("KILL");
            }
        },
    )
    .await;
    let all = assert_each_entity_in_order(&upstream, Duration::from_secs(60)).await;
    let twice = all.iter().filter(|id| upstream.count(id) > 1).count();
    assert!(
        all.iter().all(|id| upstream.count(id) <= 2) && twice <= ENTITIES,
        "only an event in flight at the kill goes again: {:?}",
        upstream.counts()
    );
    drop(b);
}

crate::on_backends!(a_fleet_keeps_each_entitys_order_through_a_sigkill: [redis, postgres]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_are_delivered_in_order_on_redis() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    // Events of one entity sent at one `created` are not stale to each other.
    let stale_by = "stale_by = \"json:/created\"";
    entities_are_delivered_in_order_one_at_a_time(Backend::Redis(redis.url()), stale_by).await;
    // What ordering keeps per entity lives no longer than its events.
    let (mut connection, kept) = keys_at(&redis.url(), "*!E:*").await;
    assert_eq!(kept.len(), ENTITIES, "{kept:?}");
    for key in kept {
        let ttl: i64 = ::redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(ttl > 0, "{key} expires with its events");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_are_delivered_in_order_on_a_one_shard_redis_cluster() {
    let Some(cluster) = shared_cluster().await else {
        return;
    };
    let one_shard = Backend::RedisCluster(format!("{}\nshards = 1", cluster.toml()));
    entities_are_delivered_in_order_one_at_a_time(one_shard, "").await;
}

/// A Redis Cluster store laid out in many shards per scope keeps that
/// layout whatever `store.shards` says later: a gateway refuses to start an
/// ordered route on it (exit 1, the reason on stderr), and a running
/// gateway rejects a reload that orders a route, serving on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_laid_out_in_shards_refuses_ordered_routes() {
    let Some(cluster) = shared_cluster().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let sharded = Backend::RedisCluster(cluster.toml());
    let one_shard = Backend::RedisCluster(format!("{}\nshards = 1", cluster.toml()));
    let plain = config_text(&upstream.url("/"), &sharded, "delivery = \"async\"", "");
    let prefix = |text: &str| {
        let rest = text.split("key_prefix = \"").nth(1).unwrap();
        rest.split('"').next().unwrap().to_owned()
    };
    let ordered = ordered_route(&upstream, &one_shard, "");
    let ordered = ordered.replace(&prefix(&ordered), &prefix(&plain));
    let admin_port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let (path, port) = write_config(dir.path(), &with_admin_on(&plain, admin_port));
    let mut gateway = GatewayProcess::start(&path, port).await;
    // The listener takes connections before the store's layout is
    // learned; the gateway serves once it is.
    let layout = format!("{}layout", prefix(&plain));
    let laid_out = eventually(Duration::from_secs(10), || async {
        cluster.get(&layout).await.as_deref() == Some("64")
    });
    assert!(laid_out.await, "a new store takes the default shards");

    std::fs::write(
        &path,
        with_admin_on(&ordered, admin_port).replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let reload = request(
        Method::POST,
        &format!("http://127.0.0.1:{admin_port}/admin/reload"),
        Some(ADMIN_TOKEN),
    )
    .await;
    let problems = reload.json()["error"]["message"].to_string();
    assert_eq!(
        reload.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{problems}"
    );
    assert!(
        problems.contains("laid out in 64 shards per scope"),
        "{problems}"
    );
    let answer = Sender::new()
        .deliver(
            &gateway.url("/hook"),
            &entity_event("evt_still", "sub_1", 1),
        )
        .await;
    assert_eq!(
        answer.status,
        StatusCode::ACCEPTED,
        "the running config serves on"
    );
    gateway.stop("TERM");

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["run", "--config", path.to_str().unwrap()])
        .env("TEST_SECRET", SECRET)
        .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ordered delivery (hook) needs each scope in one shard"),
        "{stderr}"
    );
}
