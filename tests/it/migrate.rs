//! PostgreSQL schema upgrades on a real server (docs/operations/upgrading.md,
//! "Upgrading"): `hookgate migrate` with no operation deadline, beside
//! others; `--print` as a script `psql -f` runs as it is and that records
//! its versions; a gateway whose role may not create anything serves a
//! migrated database; and a gateway started on a big old table migrates it
//! though each of its store operations has a 200 ms deadline.

use std::process::Command;
use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::*;

fn migrate(config: &std::path::Path, print: bool) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hookgate"));
    command.args(["migrate", "--config"]).arg(config);
    if print {
        command.arg("--print");
    }
    let output = command.env("TEST_SECRET", SECRET).output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn versions(database: &TestDatabase) -> Vec<i32> {
    let client = database.client().await;
    let rows = client
        .query(
            "SELECT version FROM hookgate_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

fn latest() -> Vec<i32> {
    hookgate::store::MIGRATIONS
        .iter()
        .map(|(v, _)| *v)
        .collect()
}

fn config_for(
    dir: &std::path::Path,
    upstream: &str,
    url: &str,
    store_extra: &str,
) -> std::path::PathBuf {
    let text = config_text(
        upstream,
        &Backend::Postgres(url.to_owned()),
        "",
        store_extra,
    );
    write_config(dir, &text).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_applies_once_beside_another_and_then_has_nothing_to_do() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(dir.path(), "http://127.0.0.1:9/", &database.url(), "");
    let (a, b) = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let a = scope.spawn(|| migrate(&config, false));
            let b = scope.spawn(|| migrate(&config, false));
            (a.join().unwrap(), b.join().unwrap())
        })
    });
    assert_eq!((a.0, b.0), (Some(0), Some(0)), "{a:?} {b:?}");
    let said = format!("{}{}", a.1, b.1);
    assert!(
        said.contains(&format!("applied {} migration(s)", latest().len())),
        "{said}"
    );
    assert!(
        said.contains("nothing to migrate"),
        "one found it done: {said}"
    );
    assert_eq!(versions(&database).await, latest());
    let again = tokio::task::block_in_place(|| migrate(&config, false));
    assert_eq!(again.0, Some(0));
    assert!(again.1.contains("nothing to migrate"), "{again:?}");
    let print = tokio::task::block_in_place(|| migrate(&config, true));
    assert!(print.1.contains("Nothing to do"), "{print:?}");
}

/// The printed SQL, run by `psql -v ON_ERROR_STOP=1 -f`, is the whole
/// migration: a gateway started afterwards serves without trying any DDL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_sql_runs_in_psql_and_records_its_versions() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let config = config_for(dir.path(), &upstream.url("/"), &database.url(), "");
    let (code, sql, err) = tokio::task::block_in_place(|| migrate(&config, true));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        sql.starts_with("-- hookgate's PostgreSQL schema migrations"),
        "{sql}"
    );
    let script = dir.path().join("migrate.sql");
    std::fs::write(&script, &sql).unwrap();
    let psql = tokio::task::block_in_place(|| {
        Command::new("psql")
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-f"])
            .arg(&script)
            .arg(database.url())
            .output()
            .expect("psql (postgresql-client) is on PATH")
    });
    assert!(psql.status.success(), "{psql:?}");
    assert_eq!(versions(&database).await, latest());
    // `check --print-migrations` prints the same SQL and nothing else.
    let check = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(["check", "--print-migrations", "--config"])
            .arg(&config)
            .env("TEST_SECRET", SECRET)
            .output()
            .unwrap()
    });
    let printed = String::from_utf8_lossy(&check.stdout);
    assert!(printed.starts_with("-- hookgate's PostgreSQL"), "{printed}");
    assert!(!printed.contains("route(s):"), "no summary in the SQL");

    let gateway = TestGateway::start(&std::fs::read_to_string(&config).unwrap()).await;
    let answer = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_psql"))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    gateway.shutdown().await;
}

/// PostgreSQL 15 gives non-owners no CREATE on `public`: the application
/// role gets rows, and the migrating role the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_ddl_rights_serves_a_migrated_database() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let owner = config_for(dir.path(), &upstream.url("/"), &database.url(), "");
    assert_eq!(
        tokio::task::block_in_place(|| migrate(&owner, false)).0,
        Some(0)
    );

    // The role gets exactly what `hookgate migrate --grants` prints.
    let role = format!("hg_app_{:08x}", rand::random::<u32>());
    let grants = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["migrate", "--grants", &role])
        .output()
        .unwrap();
    assert!(grants.status.success(), "{grants:?}");
    let grants = String::from_utf8(grants.stdout).unwrap();
    let client = database.client().await;
    client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; \
             REVOKE CREATE ON SCHEMA public FROM PUBLIC; \
             {grants}"
        ))
        .await
        .unwrap();
    let url = database.url().replacen("postgres@", &format!("{role}@"), 1);
    let app = tempfile::tempdir().unwrap();
    let config = config_for(app.path(), &upstream.url("/"), &url, "");
    let gateway = TestGateway::start(&std::fs::read_to_string(&config).unwrap()).await;
    let sender = Sender::new();
    let first = sender
        .deliver(&gateway.url("/hook"), &event("evt_dml"))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    let again = sender
        .deliver(&gateway.url("/hook"), &event("evt_dml"))
        .await;
    assert!(again.replayed());
    assert_eq!(upstream.count("evt_dml"), 1);
    gateway.shutdown().await;

    // Every feature that writes, under that role: an ordered async route
    // (the ordering sequence) with two destinations, paused and resumed.
    let route = "delivery = \"async\"\norder_by = \"json:/id\"\n\
                 retry_backoff = { initial = \"50ms\", max = \"100ms\" }";
    let text = config_text(
        &upstream.url("/"),
        &Backend::Postgres(url.clone()),
        route,
        "",
    )
    .replace(&format!("upstream = \"{}\"\n", upstream.url("/")), "");
    let text = format!(
        "{text}\n[[routes.destinations]]\nname = \"one\"\nupstream = \"{}\"\n\
         [[routes.destinations]]\nname = \"two\"\nupstream = \"{}\"\n",
        upstream.url("/one"),
        upstream.url("/two")
    );
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    assert_eq!(
        gateway.control("hook", "pause", "by=test").await.status,
        StatusCode::OK
    );
    for id in ["evt_ordered_1", "evt_ordered_2"] {
        let answer = sender.deliver(&gateway.url("/hook"), &event(id)).await;
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    }
    assert_eq!(
        gateway.control("hook", "resume", "").await.status,
        StatusCode::OK
    );
    let both = ["evt_ordered_1".to_owned(), "evt_ordered_2".to_owned()];
    let delivered = eventually(Duration::from_secs(20), || async {
        both.iter().all(|id| upstream.count(id) == 2)
    });
    assert!(delivered.await, "each event to each destination, once");
    gateway.shutdown().await;

    // And under the same role: encryption at rest, the hybrid's call, a
    // dead letter, and a bulk redrive of it.
    let (flaky, healthy) = Upstream::flaky().await;
    let key = app.path().join("at-rest.key");
    std::fs::write(&key, hex::encode([7u8; 32])).unwrap();
    let route = "delivery = \"async\"\nrespond_within = \"2s\"\nmax_attempts = 1";
    let store = format!(
        "[store.encryption]\nkeys = [\"${{file:{}}}\"]",
        key.display()
    );
    let text = config_text(
        &flaky.url("/"),
        &Backend::Postgres(url.clone()),
        route,
        &store,
    );
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let answer = sender
        .deliver(&gateway.url("/hook"), &event("evt_sealed"))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{answer:?}");
    let dead = eventually(Duration::from_secs(10), || async {
        let record = gateway.record("hook", "evt_sealed").await;
        record.is_some_and(|record| record.state.as_str() == "dead")
    });
    assert!(dead.await, "parked after its one attempt");
    healthy.store(true, std::sync::atomic::Ordering::SeqCst);
    let redrive = request(
        Method::POST,
        &gateway.admin_url("/admin/routes/hook/dead-letters/redeliver?rate=100"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(redrive.json()["completed"], 1, "{:?}", redrive.json());
    assert_eq!(
        flaky.count("evt_sealed"),
        2,
        "the failed call and the redrive's"
    );
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert!(
        !metrics.contains("hookgate_store_errors_total{"),
        "no store operation was refused the role: {metrics}"
    );
    gateway.shutdown().await;

    let refused = client
        .batch_execute(&format!("SET ROLE {role}; CREATE TABLE probe (x int)"))
        .await;
    assert!(refused.is_err(), "the role really has no DDL rights");
    client
        .batch_execute(&format!(
            "RESET ROLE; DROP OWNED BY {role}; DROP ROLE {role}"
        ))
        .await
        .ok();
}

/// A database at version 1 with 300,000 rows: a gateway whose operations
/// each have 200 ms migrates it anyway (in a task no deadline cuts off),
/// answers 503 meanwhile, says "migrating" in `/readyz`, then serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_old_table_is_migrated_though_each_operation_has_200ms() {
    let database = TestDatabase::create().await;
    let client = database.client().await;
    let (version, first) = hookgate::store::MIGRATIONS[0];
    client
        .batch_execute(&format!(
            "CREATE TABLE hookgate_migrations (version integer PRIMARY KEY, \
             applied_at timestamptz NOT NULL DEFAULT now()); {first} \
             INSERT INTO hookgate_migrations (version) VALUES ({version}); \
             INSERT INTO webhook_events (source, idempotency_key, status, response_status, \
               response_body, first_seen_at, completed_at, attempts, body_sha256, expires_at) \
             SELECT 'old:hook', 'evt_' || i, 'completed', 200, 'ok', now(), now(), 1, 'x', \
               now() + interval '1 day' FROM generate_series(1, 300000) AS i;"
        ))
        .await
        .unwrap();
    let upstream = Upstream::start().await;
    let text = postgres_config(&upstream.url("/"), &database.url(), "200ms", false);
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let served = eventually(Duration::from_secs(120), || async {
        sender
            .deliver(&gateway.url("/hook"), &event("evt_after"))
            .await
            .status
            == StatusCode::OK
    });
    assert!(
        served.await,
        "never migrated: {:?}",
        versions(&database).await
    );
    assert_eq!(versions(&database).await, latest());
    assert_eq!(upstream.count("evt_after"), 1);
    let ready = get(&gateway.admin_url("/readyz"), None).await;
    assert_eq!(ready.json()["store"], "ok", "{:?}", ready.json());
    gateway.shutdown().await;
}
