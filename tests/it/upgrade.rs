//! A rolling upgrade on PostgreSQL (docs/operations.md, "Upgrading"): the
//! previous release — the last with schema version 1, built by
//! `tests/previous/build.sh` (`.ci/run` runs it) — serves a table of
//! 300,000 rows while this version migrates it, and neither stalls: the
//! old gateway answers every delivery throughout, the new one serves once
//! the migration is recorded, and then both serve side by side, each event
//! forwarded once whichever version gets it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;

use crate::support::*;

/// The previous release's binary, where `tests/previous/build.sh` put it.
fn previous() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/previous/hookgate");
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
    tokio::time::sleep(Duration::from_millis(300)).await;
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
    let pairs: Vec<_> = (0..20)
        .map(|i| {
            let id = format!("evt_pair_{i}");
            let (to_old, to_new) = (old.url("/hook"), new.url("/hook"));
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
    new.shutdown().await;
    assert!(old.stop("TERM").success());
}
