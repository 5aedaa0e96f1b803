//! A rolling upgrade on PostgreSQL (docs/operations/upgrading.md, "Upgrading"): the
//! previous release — the last with schema version 1, built by
//! `tests/previous/build.sh` (`.ci/run` runs it) — serves a table of
//! 300,000 rows while this version migrates it, and neither stalls: the
//! old gateway answers every delivery throughout, the new one serves once
//! the migration is recorded, and then both serve side by side, each event
//! forwarded once whichever version gets it. The same on a Redis Cluster,
//! whose store keeps the layout the previous release gave it; and on Redis,
//! where this version's claims and completions are packed and the releases
//! before, whose claims (then completions) were hashed, read them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;

use crate::support::*;

/// The previous release's binary, where `tests/previous/build.sh` put it.
fn previous() -> Option<PathBuf> {
    built("target/previous/hookgate")
}

/// The last release whose Redis claims were hashed by default.
fn previous_hashed() -> Option<PathBuf> {
    built("target/previous/hashed/hookgate")
}

/// The last release whose Redis completions were hashed by default.
fn previous_packed() -> Option<PathBuf> {
    built("target/previous/packed/hookgate")
}

fn built(at: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(at);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: .ci/run builds it with tests/previous/build.sh",
        path.display()
    );
    eprintln!("skipped: run tests/previous/build.sh first");
    None
}

async fn one(database: &TestDatabase, sql: &str) -> i64 {
    database
        .client()
        .await
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_serves_on_while_a_big_table_migrates_under_it() {
    let _heavy = heavy().await;
    let Some(previous) = previous() else {
        return;
    };
    let database = TestDatabase::create().await;
    let upstream = Upstream::start().await;
    // One config for both versions: the same routes, store and key prefix.
    let text = config_text(
        &upstream.url("/"),
        &Backend::Postgres(database.url()),
        "",
        "timeout = \"500ms\"",
    );
    let dir = tempfile::tempdir().unwrap();
    let (old_config, port) = write_config(dir.path(), &text);
    let mut old = GatewayProcess::start_binary(&previous, &old_config, port).await;
    let sender = Sender::new();
    let first = sender.deliver(&old.url("/hook"), &event("evt_v1")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", old.logs());
    assert_eq!(
        one(
            &database,
            "SELECT max(version)::bigint FROM hookgate_migrations"
        )
        .await,
        1
    );
    // The table a long-running first release left: 300,000 completed rows
    // and 1,000 released ones (what version 1 called failed).
    database
        .client()
        .await
        .batch_execute(
            "INSERT INTO webhook_events (source, idempotency_key, status, response_status, \
               response_body, first_seen_at, completed_at, attempts, body_sha256, expires_at) \
             SELECT 'bulk:hook', 'evt_' || i, CASE WHEN i <= 1000 THEN 'released' ELSE 'completed' END, \
               200, 'ok', now() - interval '1 hour', now(), 1, 'x', now() + interval '1 day' \
             FROM generate_series(1, 300000) AS i",
        )
        .await
        .unwrap();

    // Senders keep delivering to the old gateway through the upgrade.
    let stop = Arc::new(AtomicBool::new(false));
    let answered: Arc<Mutex<Vec<(String, StatusCode, String)>>> = Arc::default();
    let load = {
        let (stop, answered, url) = (Arc::clone(&stop), Arc::clone(&answered), old.url("/hook"));
        tokio::spawn(async move {
            let sender = Sender::new();
            for n in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let id = format!("evt_during_{n}");
                let answer = sender.deliver(&url, &event(&id)).await;
                let code = answer.code();
                answered.lock().unwrap().push((id, answer.status, code));
            }
        })
    };
    let new = TestGateway::start(&with_admin(&text, true)).await;
    let before = answered.lock().unwrap().len();
    let served = eventually(Duration::from_secs(120), || async {
        let answer = Sender::new()
            .deliver(&new.url("/hook"), &event("evt_v2_probe"))
            .await;
        answer.status == StatusCode::OK
    });
    assert!(served.await, "the new gateway never served");
    let during = answered.lock().unwrap().len() - before;
    // The load goes on with the new gateway serving beside the old.
    let more = eventually(Duration::from_secs(10), || {
        ready(answered.lock().unwrap().len() >= before + during + 5)
    });
    assert!(more.await, "the load kept flowing");
    stop.store(true, Ordering::SeqCst);
    load.await.unwrap();

    let answered = answered.lock().unwrap().clone();
    assert!(
        during > 0,
        "the old gateway served while the new one migrated"
    );
    for (id, status, code) in &answered {
        assert_eq!(
            *status,
            StatusCode::OK,
            "{id}: the old gateway stalled ({code}) while the table migrated"
        );
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    let latest = hookgate::store::MIGRATIONS.last().unwrap().0 as i64;
    assert_eq!(
        one(
            &database,
            "SELECT max(version)::bigint FROM hookgate_migrations"
        )
        .await,
        latest
    );
    // The backfills reached every row, and every index is valid.
    assert_eq!(
        one(
            &database,
            "SELECT count(*) FROM webhook_events WHERE status = 'released' AND source = 'bulk:hook'"
        )
        .await,
        0
    );
    assert_eq!(
        one(
            &database,
            "SELECT count(*) FROM webhook_events \
             WHERE updated_at <> date_trunc('milliseconds', first_seen_at) AND source = 'bulk:hook'"
        )
        .await,
        0
    );
    assert_eq!(
        one(
            &database,
            "SELECT count(*) FROM pg_index WHERE NOT indisvalid"
        )
        .await,
        0
    );

    // Side by side: what either version did, the other replays, and
    // duplicates arriving at both at once are forwarded once.
    for (id, _, _) in answered.iter().take(20) {
        let answer = sender.deliver(&new.url("/hook"), &event(id)).await;
        assert!(answer.replayed(), "{id} through the new gateway");
    }
    let probe = sender
        .deliver(&old.url("/hook"), &event("evt_v2_probe"))
        .await;
    assert_eq!(probe.status, StatusCode::OK, "{}", old.logs());
    assert_eq!(
        upstream.count("evt_v2_probe"),
        1,
        "replayed by the old gateway"
    );
    duplicates_split_between(&old.url("/hook"), &new.url("/hook"), &upstream).await;
    new.shutdown().await;
    assert!(old.stop("TERM").success());
}

/// A rolling upgrade on a Redis Cluster (docs/operations/stores.md, "Sharding an
/// existing cluster store"): the previous release kept a scope in one hash
/// tag; this one, meeting that store, keeps its layout (it records one
/// shard) instead of looking for events under new names, so the two serve
/// side by side and each event is forwarded once whichever gets it. A new
/// store — another key prefix on the same cluster — is sharded, and one
/// route's records sit on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_keeps_its_layout_through_a_rolling_upgrade() {
    let Some(previous) = previous() else {
        return;
    };
    let Some(cluster) = shared_cluster().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/"),
        &Backend::RedisCluster(cluster.toml()),
        "",
        "timeout = \"1s\"",
    );
    let prefix = key_prefix(&text);
    let dir = tempfile::tempdir().unwrap();
    let (old_config, port) = write_config(dir.path(), &text);
    let mut old = GatewayProcess::start_binary(&previous, &old_config, port).await;
    let sender = Sender::new();
    for i in 0..10 {
        let answer = sender
            .deliver(&old.url("/hook"), &event(&format!("evt_old_{i}")))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", old.logs());
    }

    // This version, with the default store.shards, beside the old one;
    // the packed claim off, as a roll from a release before it must
    // (docs/operations/upgrading.md, "Upgrading": the old one cannot read one).
    let rolling = text.replace(
        "timeout = \"1s\"",
        "timeout = \"1s\"\npacked_claims = false",
    );
    assert_ne!(rolling, text);
    let new = TestGateway::start(&rolling).await;
    assert_eq!(
        cluster.get(&format!("{prefix}layout")).await.as_deref(),
        Some("1"),
        "the store's layout was recorded as the old one's"
    );
    for i in 0..10 {
        let id = format!("evt_old_{i}");
        let answer = sender.deliver(&new.url("/hook"), &event(&id)).await;
        assert!(answer.replayed(), "{id} through the new gateway");
        let id = format!("evt_new_{i}");
        forwarded_then_replayed(&sender, &new.url("/hook"), &old.url("/hook"), &id).await;
    }
    duplicates_split_between(&old.url("/hook"), &new.url("/hook"), &upstream).await;
    for i in 0..10 {
        for id in [format!("evt_old_{i}"), format!("evt_new_{i}")] {
            assert_eq!(upstream.count(&id), 1, "{id}");
        }
    }
    new.shutdown().await;
    old.stop("TERM");

    // A new store on the same cluster: sharded, one route over every master.
    let sharded = config_text(
        &upstream.url("/"),
        &Backend::RedisCluster(cluster.toml()),
        "",
        "timeout = \"1s\"",
    );
    let fresh = key_prefix(&sharded);
    let gateway = TestGateway::start(&sharded).await;
    for i in 0..90 {
        let id = format!("evt_spread_{i}");
        let answer = sender.deliver(&gateway.url("/hook"), &event(&id)).await;
        assert_eq!(answer.status, StatusCode::OK, "{id}");
    }
    assert_eq!(
        cluster.get(&format!("{fresh}layout")).await.as_deref(),
        Some(hookgate::store::DEFAULT_CLUSTER_SHARDS.to_string().as_str())
    );
    let spread = cluster
        .keys_per_master(&format!("{fresh}{{hook.*}}:*"))
        .await;
    assert_eq!(spread.len(), 3, "{spread:?}");
    assert!(spread.iter().all(|(_, n)| *n > 0), "{spread:?}");
    assert_eq!(spread.iter().map(|(_, n)| n).sum::<usize>(), 90);
    gateway.shutdown().await;
}

/// A rolling upgrade on Redis to packed claims (docs/operations/upgrading.md,
/// "Upgrading"): the release before wrote hashed claims and reads packed
/// ones, not packed completions, so the new gateway rolls beside it with
/// `packed_completions = false`, as that page says. Side by side on one
/// Redis, the new gateway's claim of a new event is a string; the old one
/// meets it while its delivery runs and answers in flight (not an error,
/// not a second forward), then replays it; and events either claimed are
/// forwarded once whichever version gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_before_reads_packed_claims_through_a_rolling_upgrade() {
    let Some(previous) = previous_hashed() else {
        return;
    };
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        delay: if seen.key().starts_with("evt_slow") {
            Duration::from_secs(2)
        } else {
            Duration::ZERO
        },
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", "");
    let dir = tempfile::tempdir().unwrap();
    let (old_config, port) = write_config(dir.path(), &text);
    let mut old = GatewayProcess::start_binary(&previous, &old_config, port).await;
    let new =
        TestGateway::start(&text.replacen("[store]\n", "[store]\npacked_completions = false\n", 1))
            .await;
    let sender = Sender::new();

    // The new gateway's claim, while its upstream call runs: a string.
    let slow = event("evt_slow_1");
    let (to_new, body) = (new.url("/hook"), slow.clone());
    let first = tokio::spawn(async move { Sender::new().deliver(&to_new, &body).await });
    let seen = eventually(Duration::from_secs(5), || async {
        upstream.count("evt_slow_1") == 1
    })
    .await;
    assert!(seen, "the new gateway forwards the slow event");
    let (mut raw, key) = stored_key(&redis, "evt_slow_1").await;
    let kind: String = redis::cmd("TYPE")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "string", "the new release claims packed");
    // The old gateway meets it in flight: it read the packed record.
    let duplicate = sender.deliver(&old.url("/hook"), &slow).await;
    assert_eq!(
        duplicate.status,
        StatusCode::CONFLICT,
        "{}: {}",
        String::from_utf8_lossy(&duplicate.body),
        old.logs()
    );
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    let again = sender.deliver(&old.url("/hook"), &slow).await;
    assert!(again.replayed(), "the old gateway replays it");

    each_forwarded_once(&old.url("/hook"), &new.url("/hook"), &upstream).await;
    assert_eq!(upstream.count("evt_slow_1"), 1);
    new.shutdown().await;
    old.stop("TERM");
}

/// A rolling upgrade on Redis to packed completions
/// (docs/operations/upgrading.md, "Upgrading"): the release before
/// completed into the hash and reads the string. Side by side on one Redis,
/// each on its defaults, the new gateway's completion of a sync event is a
/// `p2:` string; the old one replays it from there, status, headers and
/// body whole; the new one replays what the old one completed; and events
/// either claimed are forwarded once whichever version gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_before_reads_packed_completions_through_a_rolling_upgrade() {
    let Some(previous) = previous_packed() else {
        return;
    };
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", "");
    let dir = tempfile::tempdir().unwrap();
    let (old_config, port) = write_config(dir.path(), &text);
    let mut old = GatewayProcess::start_binary(&previous, &old_config, port).await;
    let new = TestGateway::start(&text).await;
    let sender = Sender::new();

    // The new gateway's completion: one string.
    let done = event("evt_done_1");
    let first = sender.deliver(&new.url("/hook"), &done).await;
    assert_eq!(first.status, StatusCode::OK);
    let (mut raw, key) = stored_key(&redis, "evt_done_1").await;
    let record: Vec<u8> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        record.starts_with(b"p2:"),
        "the new release completes packed"
    );
    // The old gateway answers from it with the answer the new one got.
    let again = sender.deliver(&old.url("/hook"), &done).await;
    assert!(again.replayed(), "{}", old.logs());
    assert_eq!(again.status, first.status);
    assert_eq!(again.body, first.body);
    assert_eq!(
        again.headers.get("x-upstream"),
        first.headers.get("x-upstream")
    );

    each_forwarded_once(&old.url("/hook"), &new.url("/hook"), &upstream).await;
    assert_eq!(upstream.count("evt_done_1"), 1);
    new.shutdown().await;
    old.stop("TERM");
}

/// Events first delivered to either version, then to the other, and events
/// delivered to both at once: each forwarded once.
async fn each_forwarded_once(old: &str, new: &str, upstream: &Upstream) {
    let sender = Sender::new();
    for i in 0..10 {
        forwarded_then_replayed(&sender, old, new, &format!("evt_old_{i}")).await;
        forwarded_then_replayed(&sender, new, old, &format!("evt_new_{i}")).await;
    }
    duplicates_split_between(old, new, upstream).await;
    for i in 0..10 {
        for id in [format!("evt_old_{i}"), format!("evt_new_{i}")] {
            assert_eq!(upstream.count(&id), 1, "{id}");
        }
    }
}

/// A raw connection to `redis`, and the one key that holds `id`'s record.
async fn stored_key(redis: &RedisServer, id: &str) -> (redis::aio::MultiplexedConnection, String) {
    let (raw, keys) = keys_at(&redis.url(), &format!("*{id}")).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    (raw, keys.into_iter().next().unwrap())
}

/// `id` delivered through `first` (forwarded), then through `then`
/// (replayed from what `first` recorded).
async fn forwarded_then_replayed(sender: &Sender, first: &str, then: &str, id: &str) {
    let answer = sender.deliver(first, &event(id)).await;
    assert_eq!(answer.status, StatusCode::OK, "{id}");
    let again = sender.deliver(then, &event(id)).await;
    assert!(again.replayed(), "{id} through the other gateway");
}

fn key_prefix(text: &str) -> String {
    let rest = text.split("key_prefix = \"").nth(1).unwrap();
    rest.split('"').next().unwrap().to_owned()
}

/// 20 events, each delivered to both versions at once: every one is
/// forwarded once, the other delivery answered in flight or replayed.
async fn duplicates_split_between(old: &str, new: &str, upstream: &Upstream) {
    let pairs: Vec<_> = (0..20)
        .map(|i| {
            let id = format!("evt_pair_{i}");
            let (to_old, to_new) = (old.to_owned(), new.to_owned());
            tokio::spawn(async move {
                let (body, one, other) = (event(&id), Sender::new(), Sender::new());
                let (a, b) =
                    tokio::join!(one.deliver(&to_old, &body), other.deliver(&to_new, &body));
                (id, a.status, b.status)
            })
        })
        .collect();
    for pair in pairs {
        let (id, a, b) = pair.await.unwrap();
        assert!(a.is_success() || a == StatusCode::CONFLICT, "{id}: old {a}");
        assert!(b.is_success() || b == StatusCode::CONFLICT, "{id}: new {b}");
        assert_eq!(upstream.count(&id), 1, "{id}: forwarded once");
    }
}
