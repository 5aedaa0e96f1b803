//! The store contract (`hookgate::store::Backend`), run against every
//! backend, one file per capability: [`records`], [`queue`] (and [`life`],
//! the record's life across entrances), [`listing`], [`fleet`]. Adding a
//! backend is one function here, opening its store, and its name in the
//! one list of backends (`support/stores.rs`).

/// `conformance! { tests: [...] }`: each test once per backend of the one
/// list below (`backends: [...]` names others: the shard suites), in a
/// module of the backend's name; each backend is the `async fn` of that
/// name below (`None` skips where it cannot run, outside CI).
macro_rules! conformance {
    // Every backend (the one list, `support/stores.rs`), and Redis twice
    // more: with the packed claim, and with its completion packed too.
    (tests: $tests:tt $(,)?) => {
        crate::every_backend!(conformance { tests: $tests, });
        conformance!(@backend redis_packed $tests);
        conformance!(@backend redis_packed_completions $tests);
    };
    (tests: $tests:tt, backends: [$($backend:ident),* $(,)?] $(,)?) => {
        $( conformance!(@backend $backend $tests); )*
    };
    (@backend $backend:ident [$($test:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let Some(opened) = super::$backend().await else { return };
                    super::$test(opened.store, opened.time).await;
                }
            )*
        }
    };
}

mod fleet;
mod life;
mod listing;
mod order;
mod packed;
mod queue;
mod records;
mod shards;
mod transfer;

use std::time::Duration;

use bytes::Bytes;

use hookgate::config::{Backend as StoreBackend, StoreSettings, Synchronous};

use hookgate::metrics::StoreMetrics;

use hookgate::store::{BodyKept, RecordedResponse};

use hookgate::store::{
    AttemptKind, Backend, Backends, ClaimMode, ClaimOutcome, ClaimRequest, Clock, EmbeddedStore,
    Failure, FailureClass, Lease, MemoryStore, Next, PastAttempt, PostgresStore, RedisStore, Store,
    StoreKey, Stored, StoredRequest, SyncNext,
};

use http::{HeaderMap, Method, StatusCode};

use crate::support::{shared_cluster, shared_sentinels, RedisServer, TestDatabase};

pub(crate) const SHA_A: &str = "aaaa";

pub(crate) const SHA_B: &str = "bbbb";

pub(crate) const LONG: Duration = Duration::from_secs(60);

/// How a test lets time pass for a backend: the store clock of the
/// backends that keep their own (memory, embedded) moves at once; Redis
/// judges leases by its own clock, so there the test waits.
pub enum Time {
    Clock(Clock),
    Wall,
}

impl Time {
    pub(crate) async fn pass(&self, duration: Duration) {
        match self {
            Time::Clock(clock) => clock.advance(duration),
            Time::Wall => tokio::time::sleep(duration).await,
        }
    }
}

/// The key of event `id`. Every key shares the hash tag `{c}`, as the
/// gateway arranges for a scope on a cluster, so guards work there too.
pub(crate) fn k(id: &str) -> StoreKey {
    StoreKey::event("hookgate:{c}", id)
}

/// The replay guard of body `body`.
pub(crate) fn guard(body: &str) -> StoreKey {
    StoreKey::guard("hookgate:{c}", body)
}

pub(crate) fn request<'a>(
    key: &'a StoreKey,
    sha: &'a str,
    processing_ttl: Duration,
) -> ClaimRequest<'a> {
    ClaimRequest::delivery(key, sha, processing_ttl, Duration::from_secs(600))
}

pub(crate) fn response(body: &'static str) -> RecordedResponse {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "text/plain".parse().unwrap());
    RecordedResponse {
        status: StatusCode::CREATED,
        headers,
        body: Bytes::from_static(body.as_bytes()),
        body_kept: BodyKept::Whole,
    }
}

pub(crate) async fn claim_new(store: &Store, id: &str, lease: Duration) -> Lease {
    claim_new_key(store, &k(id), lease).await
}

/// A new claim of `key` (body `SHA_A`): its lease.
pub(crate) async fn claim_new_key(store: &Store, key: &StoreKey, lease: Duration) -> Lease {
    match store
        .records()
        .claim(request(key, SHA_A, lease))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("expected a new claim of {key}, got {other:?}"),
    }
}

/// A backend under test, as the gateway wraps it, and how to let time pass.
pub(crate) struct Opened {
    pub(crate) store: Store,
    pub(crate) time: Time,
    /// What must live as long as the test: a temp dir, a redis-server.
    _keep: Box<dyn std::any::Any + Send>,
}

fn opened(
    backend: impl Backend + Into<Backends>,
    time: Time,
    keep: impl std::any::Any + Send,
) -> Opened {
    let metrics = StoreMetrics::unregistered();
    Opened {
        store: Store::new(backend, "hookgate:", Duration::from_secs(2), metrics),
        time,
        _keep: Box::new(keep),
    }
}

pub(crate) async fn memory() -> Option<Opened> {
    let clock = crate::support::clock();
    let backend = MemoryStore::new(clock.clone());
    Some(opened(backend, Time::Clock(clock), ()))
}

pub(crate) async fn embedded() -> Option<Opened> {
    let dir = tempfile::tempdir().unwrap();
    let clock = crate::support::clock();
    let path = dir.path().join("hookgate.db");
    let backend = EmbeddedStore::open(&path, Synchronous::Normal, clock.clone()).unwrap();
    Some(opened(backend, Time::Clock(clock), dir))
}

/// `backend`'s settings with the hashed claim: the `redis` and `cluster`
/// backends run every contract on the claim script, `redis_packed` on the
/// packed claim (the default).
fn hashed(backend: StoreBackend) -> StoreSettings {
    StoreSettings {
        packed_claims: false,
        ..StoreSettings::new(backend)
    }
}

pub(crate) async fn redis() -> Option<Opened> {
    let redis = RedisServer::start().await?;
    let settings = hashed(StoreBackend::Redis { url: redis.url() });
    let backend = RedisStore::connect(&redis.url(), &settings).unwrap();
    Some(opened(backend, Time::Wall, redis))
}

/// Redis with the packed claim (`store/redis/packed.rs`) completed into the
/// hash (`packed_completions = false`, as releases before fe3f5ff did by
/// default): every new sync claim is a string until a script reads it.
pub(crate) async fn redis_packed() -> Option<Opened> {
    let redis = RedisServer::start().await?;
    let settings = StoreSettings {
        packed_completions: false,
        ..StoreSettings::new(StoreBackend::Redis { url: redis.url() })
    };
    let backend = RedisStore::connect(&redis.url(), &settings).unwrap();
    Some(opened(backend, Time::Wall, redis))
}

/// Redis as configured by default: the packed claim completed packed
/// (`store.packed_completions`), so a sync event completed on its first
/// claim stays a string, listed, until a script reads it.
pub(crate) async fn redis_packed_completions() -> Option<Opened> {
    let redis = RedisServer::start().await?;
    let settings = StoreSettings::new(StoreBackend::Redis { url: redis.url() });
    let backend = RedisStore::connect(&redis.url(), &settings).unwrap();
    Some(opened(backend, Time::Wall, redis))
}

/// The primary of a real replica set under three sentinels, found through
/// them, with the claim configured by default; one set shared by the tests,
/// as the cluster is.
pub(crate) async fn sentinel() -> Option<Opened> {
    let set = shared_sentinels().await?;
    let (sentinels, master) = set.store();
    let settings = StoreSettings::new(StoreBackend::RedisSentinel {
        sentinels: sentinels.clone(),
        master: master.clone(),
        url: None,
    });
    let backend = RedisStore::connect_sentinel(&sentinels, &master, None, &settings).unwrap();
    Some(opened(backend, Time::Wall, ()))
}

pub(crate) async fn postgres() -> Option<Opened> {
    let database = TestDatabase::create().await;
    // 1,000 claims at once wait for 8 connections inside their deadline.
    let settings = StoreSettings {
        timeout: Duration::from_secs(5),
        ..StoreSettings::new(StoreBackend::Postgres {
            url: database.url(),
            pool_size: 8,
        })
    };
    let backend = PostgresStore::connect(&database.url(), 8, &settings).unwrap();
    Some(opened(backend, Time::Wall, database))
}

pub(crate) async fn cluster() -> Option<Opened> {
    let nodes = shared_cluster().await?.nodes();
    let settings = hashed(StoreBackend::RedisCluster {
        nodes: nodes.clone(),
        shards: 1,
    });
    // The replay guard checked in the steps a sharded layout takes.
    let backend = RedisStore::connect_cluster(&nodes, &settings)
        .unwrap()
        .guard_in_steps();
    Some(opened(backend, Time::Wall, ()))
}

/// A Redis Cluster store laid out in `shards` shards per scope, as a new
/// store is under `store.shards`: a key prefix of its own, whose layout it
/// records.
pub(crate) async fn cluster_sharded(shards: u16) -> Option<Opened> {
    let nodes = shared_cluster().await?.nodes();
    let settings = hashed(StoreBackend::RedisCluster {
        nodes: nodes.clone(),
        shards,
    });
    let backend = RedisStore::connect_cluster(&nodes, &settings).unwrap();
    let prefix = format!("c{}:", rand::random::<u32>());
    let mut store = Store::new(
        backend,
        &prefix,
        Duration::from_secs(2),
        StoreMetrics::unregistered(),
    );
    assert_eq!(store.learn_layout(&[], shards).await.unwrap(), shards);
    Some(Opened {
        store,
        time: Time::Wall,
        _keep: Box::new(()),
    })
}

pub(crate) fn stored_request() -> StoredRequest {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("stripe-signature", "t=1,v1=abc".parse().unwrap());
    headers.append("x-multi", "one".parse().unwrap());
    headers.append("x-multi", "two: three".parse().unwrap());
    StoredRequest {
        method: Method::POST,
        query: Some("a=1&b=2".into()),
        headers,
        // Not UTF-8, with CR LF and NUL: kept byte for byte.
        body: Bytes::from_static(b"{\"id\":\"evt\"}\r\n\x00\xff\xfe"),
    }
}

/// A refused attempt: a sync record turns failed (held with `hold`) or
/// dead; an accepted one is dead (no retry planned).
/// The attempt `failure` records: a worker's 503 with the upstream's body.
pub(crate) static REFUSED: std::sync::LazyLock<PastAttempt> = std::sync::LazyLock::new(|| {
    PastAttempt::new(
        1_700_000_000_000,
        AttemptKind::Worker,
        FailureClass::Refused,
        Some(503),
        42,
        None,
        br#"{"error":"orders DB: connection pool exhausted"}"#,
    )
});

pub(crate) fn failure<'a>(request: &'a StoredRequest, dead: bool, hold: bool) -> Failure<'a> {
    Failure {
        class: FailureClass::Refused,
        status: Some(503),
        request,
        attempt: &REFUSED,
        route: "stripe",
        retention: LONG,
        next: Next {
            sync: if dead {
                SyncNext::Dead
            } else {
                SyncNext::Failed { hold }
            },
            queued: None,
        },
    }
}

/// A refused attempt whose accepted record is due again after `after`.
pub(crate) fn retry<'a>(request: &'a StoredRequest, after: Duration) -> Failure<'a> {
    let mut failure = failure(request, false, false);
    failure.next.queued = Some(after);
    failure
}

pub(crate) fn redeliver<'a>(key: &'a StoreKey, force: bool) -> ClaimRequest<'a> {
    ClaimRequest {
        mode: ClaimMode::Redeliver { force },
        ..request(key, SHA_A, LONG)
    }
}

/// Accept `id` in `scope` as an async event (docs/guide/async-delivery.md, "Asynchronous delivery").
pub(crate) async fn accept(
    store: &Store,
    scope: &str,
    id: &str,
    kept: &StoredRequest,
) -> ClaimOutcome {
    let key = store.key(scope, id);
    let claim = ClaimRequest {
        mode: ClaimMode::Accept,
        stored: Some(Stored {
            request: kept,
            route: "orders",
            replay_of: None,
        }),
        ..request(&key, SHA_A, LONG)
    };
    store.records().claim(claim).await.unwrap()
}
