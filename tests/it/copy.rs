//! `hookgate store copy` between every pair of backends, as an operator
//! moves a fleet (docs/operations/stores.md, "Moving between stores"): copy while
//! the old store serves, switch, copy again, stop the old fleet. After it,
//! every retry of an event completed before the move is replayed, a dead
//! letter stays dead, a queued event is delivered once, a pause holds.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;

use crate::support::*;

/// The kinds of store a fleet moves between (memory lives inside one
/// process, and has nothing to copy).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Embedded,
    Redis,
    Cluster,
    Postgres,
}

const KINDS: [Kind; 4] = [Kind::Embedded, Kind::Redis, Kind::Cluster, Kind::Postgres];

/// A fresh store of `kind`, and what must live as long as it is used.
async fn fresh(kind: Kind, dir: &std::path::Path, name: &str) -> (Backend, Box<dyn std::any::Any>) {
    match kind {
        Kind::Embedded => (
            Backend::Embedded(dir.join(format!("{name}.db"))),
            Box::new(()),
        ),
        Kind::Redis => {
            let redis = RedisServer::start()
                .await
                .expect("redis-server (CI installs it)");
            (Backend::Redis(redis.url()), Box::new(redis))
        }
        // Shared by the tests: each config has a key prefix of its own.
        Kind::Cluster => {
            let cluster = shared_cluster().await.expect("a Redis Cluster");
            (Backend::RedisCluster(cluster.toml()), Box::new(()))
        }
        Kind::Postgres => {
            let database = TestDatabase::create().await;
            (Backend::Postgres(database.url()), Box::new(database))
        }
    }
}

/// A sync route `/hook` (parked after one refused attempt) and an async
/// route `/async` (retried every second) on `backend`, with the admin API.
fn config(upstream: &Upstream, backend: &Backend) -> String {
    let text = config_text(&upstream.url("/hook"), backend, "max_attempts = 1", "");
    let queue = format!(
        "[[routes]]\nname = \"async\"\npath = \"/async\"\nupstream = \"{}\"\nkey = [\"json:/id\"]\n\
         delivery = \"async\"\nretry_backoff = {{ initial = \"1s\", max = \"1s\" }}\n\
         [routes.verify]\nscheme = \"hmac\"\nsecrets = [\"${{TEST_SECRET}}\"]\nheader = \"X-Signature\"\nprefix = \"sha256=\"\n",
        upstream.url("/async")
    );
    with_admin(&format!("{text}\n{queue}"), true)
}

/// `hookgate store copy --from --to`: its exit code and what it printed.
fn store_copy(from: &std::path::Path, to: &std::path::Path) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["store", "copy", "--from"])
        .arg(from)
        .arg("--to")
        .arg(to)
        .env("TEST_SECRET", SECRET)
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), printed)
}

/// The `copied` and `kept` counts of `state` in a copy's output.
fn counts(printed: &str, state: &str) -> (u64, u64) {
    let line = (printed.lines())
        .find(|line| line.split_whitespace().next() == Some(state))
        .unwrap_or_else(|| panic!("no {state} line in:\n{printed}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |at: usize| words.get(at).map_or(0, |n| n.parse().unwrap());
    (number(2), number(4))
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}_{i}")).collect()
}

/// One move of a fleet from a store of `from` to one of `to`.
async fn move_fleet(from: Kind, to: Kind) {
    let (upstream, healthy) = Upstream::flaky().await;
    let dir = tempfile::tempdir().unwrap();
    let (source, _source_keep) = fresh(from, dir.path(), "source").await;
    let (destination, _destination_keep) = fresh(to, dir.path(), "destination").await;
    let (source_text, destination_text) =
        (config(&upstream, &source), config(&upstream, &destination));
    let (source_config, destination_config) =
        (dir.path().join("a.toml"), dir.path().join("b.toml"));
    std::fs::write(&source_config, &source_text).unwrap();
    std::fs::write(&destination_config, &destination_text).unwrap();

    let old = TestGateway::start(&source_text).await;
    let sender = Sender::new();
    let (done, dead, queued, late) = (
        ids("done", 20),
        ids("dead", 2),
        ids("queued", 3),
        ids("late", 5),
    );
    healthy.store(true, Ordering::SeqCst);
    for id in &done {
        let answer = sender.deliver(&old.url("/hook"), &event(id)).await;
        assert_eq!(answer.status, StatusCode::OK, "{from:?}: {id}");
    }
    healthy.store(false, Ordering::SeqCst);
    for id in &dead {
        let answer = sender.deliver(&old.url("/hook"), &event(id)).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{id}");
    }
    for id in &queued {
        let answer = sender.deliver(&old.url("/async"), &event(id)).await;
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{id}");
    }
    // Tried once and refused: queued again, due within a second.
    assert!(upstream.all_reached(&queued, Duration::from_secs(10)).await);
    // The async route is paused before the move, so that one queue at a
    // time delivers; the pause moves with the records.
    let paused = old.control("async", "pause", "by=ops&reason=moving").await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.json());

    let (code, first) = store_copy(&source_config, &destination_config);
    assert_eq!(code, Some(0), "{from:?} → {to:?}:\n{first}");
    assert_eq!(counts(&first, "completed").0, 20, "{first}");
    assert_eq!(counts(&first, "dead").0, 2, "{first}");
    assert_eq!(counts(&first, "pauses").0, 1, "{first}");

    // The old fleet serves on while the new one starts.
    healthy.store(true, Ordering::SeqCst);
    for id in &late {
        let answer = sender.deliver(&old.url("/hook"), &event(id)).await;
        assert_eq!(answer.status, StatusCode::OK, "{id}");
    }
    // An embedded store serves one process: its gateway starts after the
    // last copy. A shared store takes the new fleet at once and is copied
    // into again while it serves.
    let (new, second) = if to == Kind::Embedded {
        let (code, second) = store_copy(&source_config, &destination_config);
        assert_eq!(code, Some(0), "{second}");
        (TestGateway::start(&destination_text).await, second)
    } else {
        let new = TestGateway::start(&destination_text).await;
        let (code, second) = store_copy(&source_config, &destination_config);
        assert_eq!(code, Some(0), "{second}");
        (new, second)
    };
    old.shutdown().await;
    assert_eq!(
        counts(&second, "completed"),
        (5, 20),
        "{from:?} → {to:?}:\n{second}"
    );
    assert_eq!(counts(&second, "dead"), (0, 2), "{second}");

    // Every retry of what the old fleet did is answered from its record.
    for id in done.iter().chain(&late) {
        let answer = sender.deliver(&new.url("/hook"), &event(id)).await;
        assert_eq!(answer.status, StatusCode::OK, "{from:?} → {to:?}: {id}");
        assert!(answer.replayed(), "{from:?} → {to:?}: {id} is a replay");
        assert_eq!(
            upstream.count(id),
            1,
            "{from:?} → {to:?}: {id} forwarded once"
        );
    }
    for id in &dead {
        let answer = sender.deliver(&new.url("/hook"), &event(id)).await;
        assert_eq!(
            answer.status,
            StatusCode::ACCEPTED,
            "{id}: dead_letter_status"
        );
        assert_eq!(answer.json()["event"]["state"], "dead", "{id}");
        assert_eq!(upstream.count(id), 1, "{id}: not forwarded again");
    }
    // The queue moved paused: nothing delivered until the operator resumes.
    let routes = get(&new.admin_url("/admin/routes"), Some(ADMIN_TOKEN))
        .await
        .json();
    let route = (routes["routes"].as_array().unwrap().iter())
        .find(|route| route["name"] == "async")
        .cloned()
        .unwrap();
    assert_eq!(route["paused"]["by"], "ops", "{routes}");
    let resumed = new.control("async", "resume", "").await;
    assert_eq!(resumed.status, StatusCode::OK);
    let delivered = eventually(Duration::from_secs(15), || {
        let upstream = &upstream;
        let queued = &queued;
        async move {
            queued.iter().all(|id| {
                (upstream.seen().iter())
                    .any(|seen| seen.key() == **id && seen.status == StatusCode::OK)
            })
        }
    });
    assert!(delivered.await, "{from:?} → {to:?}: the queue delivers");
    for id in &queued {
        let ok = (upstream.seen().iter())
            .filter(|seen| seen.key() == *id && seen.status == StatusCode::OK)
            .count();
        assert_eq!(ok, 1, "{from:?} → {to:?}: {id} delivered once");
    }
    new.shutdown().await;
}

/// Every move from `from` to each other kind.
async fn move_from(from: Kind) {
    for to in KINDS {
        if to != from {
            move_fleet(from, to).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_from_embedded_to_each_backend_forwards_nothing_twice() {
    move_from(Kind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_from_redis_to_each_backend_forwards_nothing_twice() {
    move_from(Kind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_from_a_cluster_to_each_backend_forwards_nothing_twice() {
    move_from(Kind::Cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_from_postgres_to_each_backend_forwards_nothing_twice() {
    move_from(Kind::Postgres).await;
}

/// A memory store lives in its gateway's process: a copy refuses it,
/// saying why, and copies nothing.
#[tokio::test]
async fn a_copy_refuses_a_memory_store() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let memory = dir.path().join("memory.toml");
    let embedded = dir.path().join("embedded.toml");
    std::fs::write(&memory, config(&upstream, &Backend::Memory)).unwrap();
    let file = Backend::Embedded(dir.path().join("e.db"));
    std::fs::write(&embedded, config(&upstream, &file)).unwrap();
    let (code, printed) = store_copy(&memory, &embedded);
    assert_eq!(code, Some(1), "{printed}");
    assert!(printed.contains("memory"), "{printed}");
    assert!(!dir.path().join("e.db").exists(), "nothing written");
}
