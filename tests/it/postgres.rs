//! The PostgreSQL store against a real server: a fleet of two gateway
//! processes on one database (exactly once, the seed's columns filled),
//! migrations that are idempotent and safe when instances start together,
//! and a database that goes away and comes back.

use std::time::Duration;

use hookgate::config::{Backend as StoreBackend, StoreSettings};
use hookgate::metrics::StoreMetrics;
use hookgate::store::{PostgresStore, Store};
use http::StatusCode;
use rand::seq::SliceRandom;

use crate::support::*;

/// 60 events × 3 deliveries, shuffled over two gateway processes sharing
/// one database: each event reaches the upstream once, and the table reads
/// like the seed guide's.
#[tokio::test]
async fn two_gateways_on_one_database_forward_each_event_once() {
    let database = TestDatabase::create().await;
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(rand::random::<u64>() % 10),
        ..ok_plan(seen)
    })
    .await;
    // The subject is the fleet's exactly-once, not the store's deadline:
    // 180 claims at once beside another test's big-table migration on a
    // loaded CI machine outlasted the tests' 300 ms for the whole retry.
    let text = config_text(
        &upstream.url("/"),
        &Backend::Postgres(database.url()),
        "",
        "timeout = \"5s\"",
    );
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut gateways = Vec::new();
    for dir in &dirs {
        let (path, port) = write_config(dir.path(), &text);
        gateways.push(GatewayProcess::start(&path, port).await);
    }
    let urls: Vec<String> = gateways.iter().map(|g| g.url("/hook")).collect();
    let mut deliveries: Vec<String> = (0..60)
        .flat_map(|i| std::iter::repeat_n(format!("evt_pg_{i}"), 3))
        .collect();
    deliveries.shuffle(&mut rand::thread_rng());
    let sender = Sender::new();
    let tasks: Vec<_> = deliveries
        .into_iter()
        .enumerate()
        .map(|(n, id)| {
            let (sender, url) = (sender.clone(), urls[n % urls.len()].clone());
            tokio::spawn(async move { sender.deliver_until_settled(&url, &event(&id)).await })
        })
        .collect();
    for task in tasks {
        let answer = task.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    }
    let counts = upstream.counts();
    assert_eq!(counts.len(), 60);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");

    let client = database.client().await;
    let rows = client
        .query(
            "SELECT source, idempotency_key, status, response_status, attempts, \
                    first_seen_at <= completed_at, convert_from(response_body, 'UTF8') \
             FROM webhook_events ORDER BY idempotency_key",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 60);
    for row in &rows {
        let source: String = row.get(0);
        let key: String = row.get(1);
        assert!(source.ends_with("hook"), "{source}");
        assert!(key.starts_with("evt_pg_"));
        assert_eq!(row.get::<_, String>(2), "completed");
        assert_eq!(row.get::<_, i16>(3), 200);
        // Claims taken: 1, or more when a claim whose answer was lost under
        // load was released and taken again (forwarded once all the same:
        // the upstream counts above).
        assert!(row.get::<_, i32>(4) >= 1);
        assert!(row.get::<_, bool>(5));
        assert!(row.get::<_, String>(6).contains(&key));
    }
}

/// Two stores starting at once on an empty database both come up; the
/// schema is migrated once, and migrating again changes nothing.
#[tokio::test]
async fn migrations_are_idempotent_and_safe_when_instances_start_together() {
    let database = TestDatabase::create().await;
    let open = || {
        let settings = StoreSettings::new(StoreBackend::Postgres {
            url: database.url(),
            pool_size: 2,
        });
        let backend = PostgresStore::connect(&database.url(), 2, &settings).unwrap();
        Store::new(
            backend,
            "m:",
            Duration::from_secs(5),
            StoreMetrics::unregistered(),
        )
    };
    let (first, second) = (open(), open());
    let (a, b) = tokio::join!(first.ping(), second.ping());
    a.unwrap();
    b.unwrap();
    open().ping().await.unwrap();

    let client = database.client().await;
    let versions: Vec<i32> = client
        .query(
            "SELECT version FROM hookgate_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let expected: Vec<i32> = hookgate::store::MIGRATIONS
        .iter()
        .map(|(v, _)| *v)
        .collect();
    assert_eq!(versions, expected);
}

/// A gateway starts while its database refuses connections: 503
/// `store_unavailable`, nothing forwarded. The database comes back:
/// deliveries flow without a restart. It goes away again (connections
/// killed, new ones refused) and comes back: the same, and `/readyz`'s body
/// says so meanwhile (still 200: readiness is local).
#[tokio::test]
async fn a_lost_database_is_503_and_nothing_forwarded_then_recovery() {
    let database = TestDatabase::create().await;
    let admin = database.admin_client().await;
    database.allow_connections(&admin, false).await;

    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/"),
        &Backend::Postgres(database.url()),
        "",
        "",
    )
    .replace("[store]", "[admin]\nlisten = \"127.0.0.1:0\"\n\n[store]");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    let ready = || async {
        let request = http::Request::get(gateway.admin_url("/readyz"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let answer = Sender::new().send(request).await;
        assert_eq!(answer.status, StatusCode::OK, "readiness is local");
        answer.json()["store"] != "ok"
    };
    for round in 0..2 {
        for i in 0..3 {
            let answer = sender
                .deliver(&url, &event(&format!("evt_down_{round}_{i}")))
                .await;
            assert_eq!(answer.code(), "store_unavailable", "{answer:?}");
            assert!(answer.headers.get("retry-after").is_some());
        }
        assert!(ready().await, "the body says the database is gone");
        assert_eq!(
            upstream.total(),
            round,
            "nothing forwarded while the database is gone"
        );

        database.allow_connections(&admin, true).await;
        let id = format!("evt_back_{round}");
        let recovered = eventually(Duration::from_secs(10), || async {
            sender.deliver(&url, &event(&id)).await.status == StatusCode::OK
        });
        assert!(
            recovered.await,
            "deliveries flow again once the database is back"
        );
        assert_eq!(upstream.count(&id), 1);
        assert!(!ready().await, "the body says ok again");
        database.allow_connections(&admin, false).await;
    }
    gateway.shutdown().await;
}

/// `sslmode=require` speaks TLS and verifies the server: against the
/// server's certificate (Debian's default self-signed `localhost` one, whose
/// file the test reads from the server's own `ssl_cert_file`) given as
/// `tls_ca`, deliveries flow; without it the server is not trusted, and
/// nothing is forwarded.
#[tokio::test]
async fn tls_to_postgres_is_verified() {
    let database = TestDatabase::create().await;
    let admin = database.admin_client().await;
    let ssl: String = admin.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    assert_eq!(
        ssl, "on",
        "this test needs TLS on the PostgreSQL server (Debian's default `ssl = on`)"
    );
    let cert_file: String = admin
        .query_one("SHOW ssl_cert_file", &[])
        .await
        .unwrap()
        .get(0);
    let upstream = Upstream::start().await;
    let url = database.url().replace("@127.0.0.1:", "@localhost:") + "?sslmode=require";
    let text = |extra: &str| {
        config_text(
            &upstream.url("/"),
            &Backend::Postgres(url.clone()),
            "",
            extra,
        )
    };
    let sender = Sender::new();

    let untrusted = TestGateway::start(&text("")).await;
    let answer = sender
        .deliver(&untrusted.url("/hook"), &event("evt_tls_0"))
        .await;
    assert_eq!(answer.code(), "store_unavailable", "{answer:?}");
    untrusted.shutdown().await;
    assert_eq!(upstream.total(), 0);

    let trusted = TestGateway::start(&text(&format!("tls_ca = \"{cert_file}\""))).await;
    let answer = sender
        .deliver(&trusted.url("/hook"), &event("evt_tls_1"))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let encrypted: bool = admin
        .query_one(
            "SELECT bool_or(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
             WHERE datname = $1",
            &[&database.name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(encrypted, "the gateway's connections use TLS");
    trusted.shutdown().await;
}

/// A console page over a big route never slows a sender, and is served
/// in time itself: 600,000 completed events, paged 50 at a time and deep
/// by the cursor, each page read off the listing index under a 150 ms
/// `store.timeout` (a sort of the route took seconds), while senders are
/// served beside it on connections of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_a_big_route_while_senders_are_served() {
    let database = TestDatabase::create().await;
    let upstream = Upstream::start().await;
    let text = postgres_config(&upstream.url("/"), &database.url(), "150ms", true);
    let prefix = text
        .split("key_prefix = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    // The schema migrates on first use, outside any deadline: until it is
    // done, a delivery answers 503 and the sender retries (on a loaded
    // machine, longer than the 150 ms `store.timeout`).
    let served = eventually(Duration::from_secs(30), || async {
        let first = sender
            .deliver(&gateway.url("/hook"), &event("evt_first"))
            .await;
        first.status == StatusCode::OK
    })
    .await;
    assert!(served, "migrated and serving");
    database
        .client()
        .await
        .batch_execute(&format!(
            "INSERT INTO webhook_events (source, idempotency_key, status, response_status, \
               response_body, first_seen_at, completed_at, updated_at, attempts, body_sha256, expires_at) \
             SELECT '{prefix}hook', 'evt_old_' || i, 'completed', 200, 'ok', now(), now(), \
               now() - (i / 3) * interval '1 millisecond', 1, 'x', now() + interval '1 day' \
             FROM generate_series(1, 600000) AS i; ANALYZE webhook_events;"
        ))
        .await
        .unwrap();

    let paging = {
        let url = gateway.admin_url("/admin/events?route=hook&state=completed&limit=50");
        tokio::spawn(async move {
            let mut pages = Vec::new();
            // Twice through 40 pages, each following the last's cursor
            // (records three to a millisecond: the cursor splits them).
            for _ in 0..2 {
                let mut cursor = String::new();
                for _ in 0..40 {
                    let page = request(
                        http::Method::GET,
                        &format!("{url}{cursor}"),
                        Some(ADMIN_TOKEN),
                    )
                    .await;
                    pages.push((
                        page.status,
                        page.json()["events"].as_array().map_or(0, Vec::len),
                    ));
                    match page.json()["next_cursor"].as_str() {
                        Some(next) => cursor = format!("&cursor={next}"),
                        None => break,
                    }
                }
            }
            pages
        })
    };
    let mut answers = Vec::new();
    for i in 0..40 {
        let answer = sender
            .deliver(&gateway.url("/hook"), &event(&format!("evt_busy_{i}")))
            .await;
        answers.push(answer.status);
    }
    let pages = paging.await.unwrap();
    assert_eq!(pages.len(), 80);
    assert!(
        pages
            .iter()
            .all(|(status, n)| *status == StatusCode::OK && *n == 50),
        "every page served in time, whole: {pages:?}"
    );
    assert!(
        answers.iter().all(|status| *status == StatusCode::OK),
        "every sender served while {} pages were asked for: {answers:?}",
        pages.len()
    );
    gateway.shutdown().await;
}

/// Two gateways through a real PgBouncer in session mode
/// (docs/operations/stores.md, "PostgreSQL"): it migrates, serves, replays, lists,
/// and concurrent duplicates split between the gateways are forwarded once.
/// (PgBouncer refuses a startup `options` parameter, so the statement
/// deadline is set on each new connection instead.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_through_pgbouncer_in_session_mode_forwards_each_event_once() {
    let database = TestDatabase::create().await;
    let Some(bouncer) = PgBouncer::start(&database, "session").await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = postgres_config(&upstream.url("/"), &bouncer.url(&database), "2s", true);
    let (one, other) = (
        TestGateway::start(&text).await,
        TestGateway::start(&text).await,
    );
    let ready = get(&one.admin_url("/readyz"), None).await;
    let sends: Vec<_> = (0..20)
        .map(|i| {
            let id = format!("evt_bounced_{i}");
            let (a, b) = (one.url("/hook"), other.url("/hook"));
            tokio::spawn(async move {
                let (body, first, second) = (event(&id), Sender::new(), Sender::new());
                let (x, y) = tokio::join!(first.deliver(&a, &body), second.deliver(&b, &body));
                (id, x.status, y.status)
            })
        })
        .collect();
    for send in sends {
        let (id, x, y) = send.await.unwrap();
        for status in [x, y] {
            assert!(
                status.is_success() || status == StatusCode::CONFLICT,
                "{id}: {status}; pgbouncer: {}",
                bouncer.log()
            );
        }
        assert_eq!(upstream.count(&id), 1, "{id}");
        let again = Sender::new()
            .deliver(&other.url("/hook"), &event(&id))
            .await;
        assert!(again.replayed(), "{id}");
    }
    assert_eq!(ready.json()["store"], "ok", "{:?}", ready.json());
    let listed = request(
        http::Method::GET,
        &one.admin_url("/admin/events?route=hook&state=completed&limit=50"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(listed.json()["events"].as_array().map(Vec::len), Some(20));
    one.shutdown().await;
    other.shutdown().await;
}

/// Concurrent claims of new keys, and then their completions, are
/// committed in groups: 200 of each take far fewer transactions than 400
/// writes, every key has one winner, and every record holds its own
/// response. A completion under a stale token, in the same groups, is
/// refused and changes nothing.
#[tokio::test]
async fn concurrent_claims_and_completions_commit_in_groups() {
    use crate::conformance::{k, request, response, SHA_A};
    use hookgate::store::{ClaimOutcome, Lease};
    use std::sync::Arc;

    let database = TestDatabase::create().await;
    let settings = StoreSettings::new(StoreBackend::Postgres {
        url: database.url(),
        pool_size: 16,
    });
    let backend = PostgresStore::connect(&database.url(), 16, &settings).unwrap();
    let store = Arc::new(Store::new(
        backend,
        "g:",
        Duration::from_secs(10),
        StoreMetrics::unregistered(),
    ));
    store.ping().await.unwrap();
    let client = database.client().await;
    // Each writing transaction takes a transaction id (reads take none).
    let next_xid = || async {
        let row = client
            .query_one("SELECT txid_current()", &[])
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let before = next_xid().await;

    // Each key twice: one claim wins it, the other finds it in flight.
    let claims: Vec<_> = (0..200)
        .flat_map(|i| [i, i])
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let key = k(&format!("grouped-{i}"));
                match store
                    .records()
                    .claim(request(&key, SHA_A, Duration::from_secs(60)))
                    .await
                {
                    Ok(ClaimOutcome::New(lease)) => Some((key, lease)),
                    Ok(ClaimOutcome::InFlight { .. }) => None,
                    other => panic!("{key}: {other:?}"),
                }
            })
        })
        .collect();
    let mut won = Vec::new();
    for claim in claims {
        won.extend(claim.await.unwrap());
    }
    assert_eq!(won.len(), 200, "one winner per key");
    const BODIES: [&str; 3] = ["first", "second", "third"];
    let body_of = |key: &str| BODIES[usize::from(key.as_bytes()[key.len() - 1]) % 3];
    let completions: Vec<_> = won
        .into_iter()
        .flat_map(|(key, lease)| {
            let stale = Lease {
                token: format!("stale-{}", lease.token),
                attempt: 1,
            };
            [(key.clone(), stale, false), (key, lease, true)]
        })
        .map(|(key, lease, holds)| {
            let store = Arc::clone(&store);
            let body = body_of(key.id());
            tokio::spawn(async move {
                let done = store
                    .records()
                    .complete(&key, &lease, &response(body), Duration::from_secs(600))
                    .await;
                assert_eq!(done.unwrap(), holds, "{key} under {}", lease.token);
            })
        })
        .collect();
    for completion in completions {
        completion.await.unwrap();
    }
    let rows = client
        .query(
            "SELECT idempotency_key, convert_from(response_body, 'UTF8') FROM webhook_events \
             WHERE status = 'completed' AND token IS NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 200);
    for row in rows {
        let key: String = row.get(0);
        assert_eq!(row.get::<_, String>(1), body_of(&key), "{key}");
    }
    // Without groups: 400 writing transactions (a losing claim's insert
    // finds the key and writes nothing).
    let transactions = next_xid().await - before - 1;
    assert!(
        transactions < 100,
        "{transactions} transactions for 400 writes"
    );
}
