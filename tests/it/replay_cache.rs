//! The replay cache (`store.replay_cache_bytes`): duplicates of a completed
//! event are answered in process, and an operator's forget or forced
//! redelivery on one instance reaches every instance's cache — two gateways
//! on one real Redis, a real Redis Cluster and a real PostgreSQL.

use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::*;

fn hits(metrics: &str) -> f64 {
    sample(metrics, "hookgate_replay_cache_hits_total", &[]).unwrap_or(0.0)
}

/// A duplicate on B is answered from B's cache (the store is not asked:
/// the hit counter moves); a `DELETE` on A empties B's cache, so B forwards
/// the next delivery — once.
async fn a_forget_on_one_instance_reaches_the_other(store: &str, upstream: &Upstream) {
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, "", "")
            .replace("backend = \"memory\"", store),
        true,
    );
    let (a, b) = (
        TestGateway::start(&text).await,
        TestGateway::start(&text).await,
    );
    assert!(
        a.replay_cache_live().await && b.replay_cache_live().await,
        "the invalidation feeds connect"
    );
    let sender = Sender::new();
    let id = format!("evt_cached_{}", rand::random::<u32>());
    let body = event(&id);

    assert_eq!(
        sender.deliver(&a.url("/hook"), &body).await.status,
        StatusCode::OK
    );
    // B's first duplicate asks the store and keeps the record; the next
    // ones are answered from B's memory.
    for _ in 0..3 {
        let again = sender.deliver(&b.url("/hook"), &body).await;
        assert!(again.replayed(), "{again:?}");
        assert_eq!(
            (
                again.json()["processed"].as_str(),
                again.json()["call"].as_u64()
            ),
            (Some(id.as_str()), Some(1)),
            "the recorded answer"
        );
    }
    let metrics = scrape(&b.admin_url("/metrics")).await;
    assert_eq!(
        hits(&metrics),
        2.0,
        "two duplicates never reached the store"
    );
    assert_eq!(
        sample(&metrics, "hookgate_replay_cache_live", &[]),
        Some(1.0)
    );
    assert_eq!(upstream.count(&id), 1);

    // "Please reprocess this event", asked of A.
    let key_url = a.admin_url(&format!("/admin/routes/hook/keys/{id}"));
    let forgot = request(Method::DELETE, &key_url, Some(ADMIN_TOKEN)).await;
    assert_eq!(forgot.status, StatusCode::OK);
    // The invalidation travels through pub/sub; it is normally there
    // before the next request. Deliver until B forwards, and count.
    let forwarded = eventually(Duration::from_secs(2), || async {
        let next = sender.deliver(&b.url("/hook"), &body).await;
        assert_eq!(next.status, StatusCode::OK);
        !next.replayed()
    });
    assert!(
        forwarded.await,
        "B kept answering from its cache after the forget"
    );
    assert_eq!(upstream.count(&id), 2, "reprocessed once");
    let after = sender.deliver(&a.url("/hook"), &body).await;
    assert!(after.replayed());
    assert_eq!(upstream.count(&id), 2);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_forget_on_one_instance_reaches_the_others_cache() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let store = format!("backend = \"redis\"\nurl = \"{}\"", redis.url());
    a_forget_on_one_instance_reaches_the_other(&store, &upstream).await;
}

/// The same on a cluster: a `PUBLISH` on one node reaches the subscribers
/// of every node.
#[tokio::test]
async fn a_forget_reaches_the_other_instances_on_a_cluster() {
    let Some(cluster) = shared_cluster().await else {
        return;
    };
    let upstream = Upstream::start().await;
    a_forget_on_one_instance_reaches_the_other(&cluster.toml(), &upstream).await;
}

/// The same on PostgreSQL: `NOTIFY` reaches every gateway's `LISTEN`.
#[tokio::test]
async fn a_forget_reaches_the_other_instances_on_postgres() {
    let database = TestDatabase::create().await;
    let upstream = Upstream::start().await;
    let store = format!("backend = \"postgres\"\nurl = \"{}\"", database.url());
    a_forget_on_one_instance_reaches_the_other(&store, &upstream).await;
}

/// Many concurrent duplicates of one completed event, on two instances
/// whose caches fill while they run: one upstream call in all.
#[tokio::test]
async fn concurrent_duplicates_through_warm_caches_forward_once() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(30),
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", "");
    let (a, b) = (
        TestGateway::start(&text).await,
        TestGateway::start(&text).await,
    );
    assert!(a.replay_cache_live().await && b.replay_cache_live().await);
    let sender = Sender::new();
    let mut tasks = Vec::new();
    for n in 0..200 {
        let url = if n % 2 == 0 {
            a.url("/hook")
        } else {
            b.url("/hook")
        };
        let sender = sender.clone();
        let id = format!("evt_warm_{}", n % 10);
        tasks.push(tokio::spawn(async move {
            sender.deliver_until_settled(&url, &event(&id)).await
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().status, StatusCode::OK);
    }
    let counts = upstream.counts();
    assert_eq!(counts.len(), 10);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    a.shutdown().await;
    b.shutdown().await;
}

/// Without its invalidation feed (Redis gone), the cache neither serves nor
/// keeps anything; it comes back with Redis.
#[tokio::test]
async fn the_cache_is_off_while_its_feed_is_down() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", "");
    let gateway = TestGateway::start(&text).await;
    assert!(gateway.replay_cache_live().await);
    redis.kill();
    let cache = &gateway.store.replay_cache().unwrap().clone();
    let noticed = eventually(Duration::from_secs(5), || ready(!cache.is_live()));
    assert!(noticed.await, "the cache noticed the feed drop");
    redis.restart().await;
    assert!(
        gateway.replay_cache_live().await,
        "and follows it again once Redis is back"
    );
    gateway.shutdown().await;
}

/// A forced redelivery on A (of an event completed after a failed attempt,
/// so its request is stored) empties B's cache too: B's next duplicate gets
/// the new recording, not the one B held.
#[tokio::test]
async fn a_forced_redelivery_on_one_instance_reaches_the_others_cache() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        status: if seen.nth == 1 {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        },
        ..ok_plan(seen)
    })
    .await;
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", ""),
        true,
    );
    let (a, b) = (
        TestGateway::start(&text).await,
        TestGateway::start(&text).await,
    );
    assert!(a.replay_cache_live().await && b.replay_cache_live().await);
    let sender = Sender::new();
    let body = event("evt_forced");
    let first = sender.deliver(&a.url("/hook"), &body).await;
    assert_eq!(first.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        sender.deliver(&a.url("/hook"), &body).await.status,
        StatusCode::OK
    );
    for _ in 0..2 {
        let cached = sender.deliver(&b.url("/hook"), &body).await;
        assert_eq!(cached.json()["call"].as_u64(), Some(2), "{cached:?}");
    }

    let url = a.admin_url("/admin/routes/hook/keys/evt_forced/redeliver?force=true");
    let forced = request(Method::POST, &url, Some(ADMIN_TOKEN)).await;
    assert_eq!(forced.json()["state"], "completed", "{:?}", forced.json());
    assert_eq!(upstream.count("evt_forced"), 3);
    let fresh = eventually(Duration::from_secs(2), || async {
        let next = sender.deliver(&b.url("/hook"), &body).await;
        assert!(next.replayed());
        next.json()["call"].as_u64() == Some(3)
    });
    assert!(
        fresh.await,
        "B kept the recording from before the redelivery"
    );
    assert_eq!(upstream.count("evt_forced"), 3);
    a.shutdown().await;
    b.shutdown().await;
}
