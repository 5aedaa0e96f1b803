//! The store contract (`hookgate::store::Backend`), run against every
//! backend. Adding a backend is one more line in the `conformance!` list at
//! the bottom.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hookgate::config::{Backend as StoreBackend, StoreSettings, Synchronous};
use hookgate::metrics::StoreMetrics;
use hookgate::replay::{BodyKept, RecordedResponse};
use hookgate::store::{
    Backend, ClaimMode, ClaimOutcome, ClaimRequest, Clock, Deleted, EmbeddedStore, Failure,
    FailureClass, Lease, MemoryStore, Next, PostgresStore, RecordState, RedisStore, Store,
    StoreKey, Stored, StoredRequest, SyncNext,
};
use http::{HeaderMap, Method, StatusCode};

use crate::support::{shared_cluster, RedisServer, TestDatabase};

pub(crate) const SHA_A: &str = "aaaa";
const SHA_B: &str = "bbbb";
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
fn guard(body: &str) -> StoreKey {
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
    let key = k(id);
    match store.claim(request(&key, SHA_A, lease)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("expected a new claim of {key}, got {other:?}"),
    }
}

async fn claim_then_duplicates(store: Store, _: Time) {
    let lease = claim_new(&store, "k1", LONG).await;
    assert_eq!(lease.attempt, 1);
    match store.claim(request(&k("k1"), SHA_A, LONG)).await.unwrap() {
        ClaimOutcome::InFlight { retry_after } => {
            assert!(retry_after >= Duration::from_secs(50), "{retry_after:?}")
        }
        other => panic!("expected in flight, got {other:?}"),
    }
    let record = store.get(&k("k1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Processing);
    assert!(record.lease_expires_at_ms.is_some());

    assert!(store
        .complete(&k("k1"), &lease, &response("done"), LONG)
        .await
        .unwrap());
    match store.claim(request(&k("k1"), SHA_B, LONG)).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.state, RecordState::Completed);
            assert_eq!(record.body_sha256, SHA_A, "the first body's hash is kept");
            assert_eq!(record.attempts, 1);
            assert!(record.completed_at_ms.unwrap() >= record.first_seen_ms);
            assert_eq!(record.response.unwrap(), response("done"));
        }
        other => panic!("expected completed, got {other:?}"),
    }
    assert!(store.get(&k("missing")).await.unwrap().is_none());
    store.ping().await.unwrap();
}

async fn concurrent_claims_have_one_winner(store: Store, _: Time) {
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for contender in 0..40 {
        for key in 0..25 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let key = k(&format!("race-{key}"));
                let _ = contender;
                match store.claim(request(&key, SHA_A, LONG)).await.unwrap() {
                    ClaimOutcome::New(lease) => Some((key.to_string(), lease.token)),
                    _ => None,
                }
            }));
        }
    }
    let mut winners = Vec::new();
    for task in tasks {
        if let Some(win) = task.await.unwrap() {
            winners.push(win);
        }
    }
    let keys: HashSet<&String> = winners.iter().map(|(k, _)| k).collect();
    assert_eq!(winners.len(), 25, "exactly one winner per key");
    assert_eq!(keys.len(), 25);
    let tokens: HashSet<&String> = winners.iter().map(|(_, t)| t).collect();
    assert_eq!(tokens.len(), 25, "fencing tokens are unique");
}

async fn an_expired_holder_is_fenced_out(store: Store, time: Time) {
    let old = claim_new(&store, "k2", Duration::from_millis(200)).await;
    assert!(matches!(
        store.claim(request(&k("k2"), SHA_B, LONG)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    time.pass(Duration::from_millis(300)).await;
    let successor = match store.claim(request(&k("k2"), SHA_B, LONG)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("the lapsed lease is taken over, got {other:?}"),
    };
    assert_eq!(successor.attempt, 2);
    assert_ne!(successor.token, old.token);

    assert!(!store.renew(&k("k2"), &old, LONG).await.unwrap());
    assert!(!store
        .complete(&k("k2"), &old, &response("stale"), LONG)
        .await
        .unwrap());
    assert!(!store.release(&k("k2"), &old).await.unwrap());
    let record = store.get(&k("k2")).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::Processing,
        "the successor's claim is untouched"
    );
    assert_eq!(record.body_sha256, SHA_B);

    assert!(store
        .complete(&k("k2"), &successor, &response("fresh"), LONG)
        .await
        .unwrap());
    let record = store.get(&k("k2")).await.unwrap().unwrap();
    assert_eq!(record.response.unwrap().body, "fresh");
    assert_eq!(record.attempts, 2);
}

async fn release_keeps_the_attempt_count(store: Store, _: Time) {
    let first = claim_new(&store, "k3", LONG).await;
    assert!(store.release(&k("k3"), &first).await.unwrap());
    let record = store.get(&k("k3")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Failed);
    assert_eq!(record.attempts, 1);

    let second = claim_new(&store, "k3", LONG).await;
    assert_eq!(second.attempt, 2);
    assert!(
        !store.release(&k("k3"), &first).await.unwrap(),
        "an old token cannot release"
    );
    assert!(!store
        .complete(&k("k3"), &first, &response("x"), LONG)
        .await
        .unwrap());
    assert!(store
        .complete(&k("k3"), &second, &response("ok"), LONG)
        .await
        .unwrap());
    assert!(
        !store.release(&k("k3"), &second).await.unwrap(),
        "a completed record stays completed"
    );
}

async fn renewal_extends_the_lease(store: Store, time: Time) {
    let ttl = Duration::from_millis(300);
    let lease = claim_new(&store, "k4", ttl).await;
    for _ in 0..6 {
        time.pass(Duration::from_millis(100)).await;
        assert!(store.renew(&k("k4"), &lease, ttl).await.unwrap());
    }
    // 600 ms after a 300 ms claim: still ours thanks to renewal.
    assert!(matches!(
        store.claim(request(&k("k4"), SHA_A, ttl)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
}

async fn delete_forgets_and_retention_expires(store: Store, time: Time) {
    let lease = claim_new(&store, "k5", LONG).await;
    assert!(store
        .complete(&k("k5"), &lease, &response("done"), LONG)
        .await
        .unwrap());
    assert_eq!(
        store.delete(&k("k5"), false).await.unwrap(),
        Deleted::Deleted
    );
    assert_eq!(
        store.delete(&k("k5"), false).await.unwrap(),
        Deleted::NotFound
    );
    assert_eq!(
        claim_new(&store, "k5", LONG).await.attempt,
        1,
        "a deleted key starts over"
    );

    // A live claim is not forgotten unless forced.
    claim_new(&store, "k9", LONG).await;
    assert_eq!(
        store.delete(&k("k9"), false).await.unwrap(),
        Deleted::InFlight
    );
    assert!(store.get(&k("k9")).await.unwrap().is_some());
    assert_eq!(
        store.delete(&k("k9"), true).await.unwrap(),
        Deleted::Deleted
    );
    // A claim whose lease lapsed (its holder died) is.
    claim_new(&store, "k10", Duration::from_millis(100)).await;
    time.pass(Duration::from_millis(200)).await;
    assert_eq!(
        store.delete(&k("k10"), false).await.unwrap(),
        Deleted::Deleted
    );

    let lease = claim_new(&store, "k6", LONG).await;
    assert!(store
        .complete(
            &k("k6"),
            &lease,
            &response("short"),
            Duration::from_millis(200)
        )
        .await
        .unwrap());
    time.pass(Duration::from_millis(400)).await;
    assert!(
        store.get(&k("k6")).await.unwrap().is_none(),
        "past retention the record is gone"
    );
    assert_eq!(claim_new(&store, "k6", LONG).await.attempt, 1);
}

async fn a_replay_guard_links_a_body_to_its_first_key(store: Store, _: Time) {
    // Keys share a hash tag, as the gateway arranges on a cluster.
    let keys: Vec<StoreKey> = (0..6).map(|i| k(&format!("g{i}"))).collect();
    let bodies: Vec<StoreKey> = (0..4).map(|i| guard(&i.to_string())).collect();
    let guarded = |key: usize, body: usize| ClaimRequest {
        guard_key: Some(&bodies[body]),
        ..request(&keys[key], SHA_A, LONG)
    };
    let first = match store.claim(guarded(1, 1)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        store.claim(guarded(2, 1)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    assert!(store
        .complete(&keys[1], &first, &response("first"), LONG)
        .await
        .unwrap());
    match store.claim(guarded(2, 1)).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(record.response.unwrap().body, "first"),
        other => panic!("the same body under a new key is a duplicate: {other:?}"),
    }
    assert!(
        store.get(&keys[2]).await.unwrap().is_none(),
        "the forged key is not recorded"
    );
    assert!(matches!(
        store.claim(guarded(3, 2)).await.unwrap(),
        ClaimOutcome::New(_)
    ));

    // A released first claim does not block the body: the next key forwards.
    let released = match store.claim(guarded(4, 3)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store.release(&keys[4], &released).await.unwrap());
    let second = match store.claim(guarded(5, 3)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    // Once the body completed under the second key, the first key's retry
    // is a duplicate of it, though that key exists (released).
    assert!(store
        .complete(&keys[5], &second, &response("second"), LONG)
        .await
        .unwrap());
    match store.claim(guarded(4, 3)).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(record.response.unwrap().body, "second"),
        other => panic!("the released key's retry is a duplicate: {other:?}"),
    }
}

async fn a_recording_says_whether_it_kept_the_body(store: Store, _: Time) {
    for (key, kept) in [("k7", BodyKept::Dropped), ("k8", BodyKept::Incomplete)] {
        let lease = claim_new(&store, key, LONG).await;
        let recorded = RecordedResponse {
            body: Bytes::new(),
            body_kept: kept,
            ..response("")
        };
        assert!(store
            .complete(&k(key), &lease, &recorded, LONG)
            .await
            .unwrap());
        let record = store.get(&k(key)).await.unwrap().unwrap();
        assert_eq!(record.response.unwrap(), recorded);
    }
}

/// A backend under test, as the gateway wraps it, and how to let time pass.
pub(crate) struct Opened {
    pub(crate) store: Store,
    pub(crate) time: Time,
    /// What must live as long as the test: a temp dir, a redis-server.
    _keep: Box<dyn std::any::Any + Send>,
}

fn opened(backend: impl Backend, time: Time, keep: impl std::any::Any + Send) -> Opened {
    let metrics = StoreMetrics::unregistered();
    Opened {
        store: Store::new(backend, "hookgate:", Duration::from_secs(2), metrics),
        time,
        _keep: Box::new(keep),
    }
}

pub(crate) async fn memory() -> Option<Opened> {
    let clock = Clock::system();
    let backend = MemoryStore::new(clock.clone());
    Some(opened(backend, Time::Clock(clock), ()))
}

pub(crate) async fn embedded() -> Option<Opened> {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::system();
    let path = dir.path().join("hookgate.db");
    let backend = EmbeddedStore::open(&path, Synchronous::Normal, clock.clone()).unwrap();
    Some(opened(backend, Time::Clock(clock), dir))
}

pub(crate) async fn redis() -> Option<Opened> {
    let redis = RedisServer::start().await?;
    let settings = StoreSettings::new(StoreBackend::Redis { url: redis.url() });
    let backend = RedisStore::connect(&redis.url(), &settings).unwrap();
    Some(opened(backend, Time::Wall, redis))
}

pub(crate) async fn postgres() -> Option<Opened> {
    let database = TestDatabase::create().await;
    let settings = StoreSettings {
        timeout: Duration::from_secs(2),
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
    let settings = StoreSettings::new(StoreBackend::RedisCluster {
        nodes: nodes.clone(),
    });
    let backend = RedisStore::connect_cluster(&nodes, &settings).unwrap();
    Some(opened(backend, Time::Wall, ()))
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
pub(crate) fn failure<'a>(request: &'a StoredRequest, dead: bool, hold: bool) -> Failure<'a> {
    Failure {
        class: FailureClass::Refused,
        status: Some(503),
        request,
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

async fn failures_keep_the_request_and_dead_letters_park(store: Store, _: Time) {
    let kept = stored_request();
    let first = claim_new(&store, "f1", LONG).await;
    assert_eq!(
        store
            .fail(&k("f1"), &first, &failure(&kept, false, false))
            .await
            .unwrap(),
        Some(RecordState::Failed)
    );
    let record = store.get(&k("f1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Failed);
    assert_eq!(record.token, None);
    assert_eq!(record.lease_expires_at_ms, None);
    let error = record.last_error.expect("the error is kept");
    assert_eq!(
        (error.class, error.status),
        (FailureClass::Refused, Some(503))
    );
    assert!(error.at_ms >= record.first_seen_ms);
    assert_eq!(record.request.as_ref(), Some(&kept), "byte for byte");
    assert_eq!(record.route.as_deref(), Some("stripe"));
    assert!(
        store
            .fail(&k("f1"), &first, &failure(&kept, true, false))
            .await
            .unwrap()
            .is_none(),
        "a spent token records nothing"
    );

    // The sender's retry claims it again; the second failure parks it.
    let second = claim_new(&store, "f1", LONG).await;
    assert_eq!(second.attempt, 2);
    let record = store.get(&k("f1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Processing);
    assert_eq!(record.request.as_ref(), Some(&kept), "kept while retried");
    assert_eq!(
        store
            .fail(&k("f1"), &second, &failure(&kept, true, false))
            .await
            .unwrap(),
        Some(RecordState::Dead)
    );
    match store.claim(request(&k("f1"), SHA_A, LONG)).await.unwrap() {
        ClaimOutcome::Dead(record) => {
            assert_eq!(record.state, RecordState::Dead);
            assert_eq!(record.attempts, 2);
        }
        other => panic!("a dead letter answers dead, got {other:?}"),
    }

    // An operator's redelivery claims a dead letter, same key.
    let third = match store.claim(redeliver(&k("f1"), false)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("a redelivery claims a dead letter, got {other:?}"),
    };
    assert_eq!(third.attempt, 3);
    assert!(store
        .complete(&k("f1"), &third, &response("at last"), LONG)
        .await
        .unwrap());
    let record = store.get(&k("f1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.response, Some(response("at last")));
    assert!(
        matches!(
            store.claim(redeliver(&k("f1"), false)).await.unwrap(),
            ClaimOutcome::Completed(_)
        ),
        "a completed record is redelivered only when forced"
    );
    match store.claim(redeliver(&k("f1"), true)).await.unwrap() {
        ClaimOutcome::New(lease) => assert_eq!(lease.attempt, 4),
        other => panic!("a forced redelivery claims a completed record, got {other:?}"),
    }
    assert!(
        matches!(
            store.claim(redeliver(&k("f1"), true)).await.unwrap(),
            ClaimOutcome::InFlight { .. }
        ),
        "never beside a live claim"
    );
}

async fn a_held_failure_answers_in_flight_until_its_lease_ends(store: Store, time: Time) {
    let kept = stored_request();
    let lease = claim_new(&store, "h1", Duration::from_millis(400)).await;
    let unknown = Failure {
        class: FailureClass::Unknown,
        status: None,
        ..failure(&kept, false, true)
    };
    assert_eq!(
        store.fail(&k("h1"), &lease, &unknown).await.unwrap(),
        Some(RecordState::Failed)
    );
    let record = store.get(&k("h1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Failed);
    assert_eq!(record.last_error.unwrap().class, FailureClass::Unknown);
    assert!(matches!(
        store.claim(request(&k("h1"), SHA_A, LONG)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    assert!(matches!(
        store.claim(redeliver(&k("h1"), true)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    assert_eq!(
        store.delete(&k("h1"), false).await.unwrap(),
        Deleted::InFlight
    );
    time.pass(Duration::from_millis(600)).await;
    assert_eq!(claim_new(&store, "h1", LONG).await.attempt, 2);
}

async fn a_claim_can_store_its_request(store: Store, _: Time) {
    let kept = stored_request();
    let key = k("r1.replay-1");
    let claim = ClaimRequest {
        stored: Some(Stored {
            request: &kept,
            route: "stripe",
            replay_of: Some("r1"),
        }),
        ..request(&key, SHA_A, LONG)
    };
    let lease = match store.claim(claim).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store
        .complete(&key, &lease, &response("replayed"), LONG)
        .await
        .unwrap());
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.request, Some(kept));
    assert_eq!(record.replay_of.as_deref(), Some("r1"));
    assert_eq!(record.route.as_deref(), Some("stripe"));
}

/// Create `id` in `scope` and leave it in `state` (queued: accepted).
async fn leave(store: &Store, scope: &str, id: &str, state: RecordState) {
    let key = store.key(scope, id);
    let kept = stored_request();
    if state == RecordState::Queued {
        assert!(matches!(
            accept(store, scope, id, &kept).await,
            ClaimOutcome::Queued
        ));
        return;
    }
    let lease = match store.claim(request(&key, SHA_A, LONG)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    match state {
        RecordState::Processing | RecordState::Queued => {}
        RecordState::Completed => assert!(store
            .complete(&key, &lease, &response("ok"), LONG)
            .await
            .unwrap()),
        RecordState::Failed | RecordState::Dead => assert_eq!(
            store
                .fail(
                    &key,
                    &lease,
                    &failure(&kept, state == RecordState::Dead, false)
                )
                .await
                .unwrap(),
            Some(state)
        ),
    }
}

/// Every page of a listing, followed to the end with `limit`-sized pages.
async fn all_pages(
    store: &Store,
    scopes: &[&str],
    state: Option<RecordState>,
    limit: usize,
) -> Vec<String> {
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(scopes, state, limit, cursor.as_ref())
            .await
            .unwrap();
        assert!(page.records.len() <= limit);
        for listed in &page.records {
            if let Some(state) = state {
                assert_eq!(listed.record.state, state);
            }
            assert!(listed.record.request.is_none(), "listings carry no bodies");
            seen.push(format!("{}/{}", listed.scope, listed.id));
        }
        match page.next {
            Some(next) => cursor = Some(hookgate::store::Cursor::decode(&next.encode()).unwrap()),
            None => return seen,
        }
    }
}

async fn listings_page_newest_first_by_state(store: Store, time: Time) {
    use RecordState::*;
    let plan = [
        ("la", "e1", Completed),
        ("lb", "p1", Processing),
        ("la", "d1", Dead),
        ("la", "e2", Completed),
        ("lb", "f1", Failed),
        ("la", "d2", Dead),
        ("la", "e3", Completed),
    ];
    for (scope, id, state) in plan {
        leave(&store, scope, id, state).await;
        time.pass(Duration::from_millis(5)).await;
    }
    let newest_first = |filter: &dyn Fn(&str, RecordState) -> bool| -> Vec<String> {
        plan.iter()
            .rev()
            .filter(|(scope, _, state)| filter(scope, *state))
            .map(|(scope, id, _)| format!("{scope}/{id}"))
            .collect()
    };
    for limit in [1, 2, 100] {
        assert_eq!(
            all_pages(&store, &["la"], Some(Completed), limit).await,
            newest_first(&|scope, state| scope == "la" && state == Completed),
            "limit {limit}"
        );
        assert_eq!(
            all_pages(&store, &["la", "lb"], None, limit).await,
            newest_first(&|_, _| true),
            "limit {limit}"
        );
    }
    assert_eq!(
        all_pages(&store, &["la", "lb"], Some(Dead), 10).await,
        ["la/d2", "la/d1"]
    );
    assert_eq!(
        all_pages(&store, &["lb"], Some(Failed), 10).await,
        ["lb/f1"]
    );
    assert_eq!(store.count("la", Dead).await.unwrap(), 2);
    assert_eq!(store.count("la", Completed).await.unwrap(), 3);
    assert_eq!(store.count("lb", Dead).await.unwrap(), 0);

    // A state change moves a record between listings; a delete drops it.
    assert_eq!(
        store.delete(&store.key("la", "d1"), false).await.unwrap(),
        Deleted::Deleted
    );
    assert_eq!(all_pages(&store, &["la"], Some(Dead), 10).await, ["la/d2"]);
    assert_eq!(store.count("la", Dead).await.unwrap(), 1);
    let lease = match store
        .claim(redeliver(&store.key("la", "d2"), false))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(all_pages(&store, &["la"], Some(Dead), 10).await.is_empty());
    assert_eq!(
        all_pages(&store, &["la"], Some(Processing), 10).await,
        ["la/d2"]
    );
    assert!(store
        .complete(&store.key("la", "d2"), &lease, &response("ok"), LONG)
        .await
        .unwrap());
    assert_eq!(
        all_pages(&store, &["la"], Some(Completed), 10).await[0],
        "la/d2",
        "newest first by last change"
    );
}

async fn listings_of_records_changed_at_once_page_exactly(store: Store, _: Time) {
    // Records changed within one millisecond share a time: the id orders
    // them, and a cursor between them neither repeats nor skips one.
    let ids: Vec<String> = (0..12).map(|i| format!("t{i:02}")).collect();
    for id in &ids {
        leave(&store, "ties", id, RecordState::Dead).await;
    }
    for limit in [1, 2, 5] {
        let mut seen = all_pages(&store, &["ties"], Some(RecordState::Dead), limit).await;
        assert_eq!(seen.len(), ids.len(), "limit {limit}: {seen:?}");
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), ids.len(), "limit {limit}: no repeats");
    }
}

async fn failed_records_outlive_completed_ones(store: Store, time: Time) {
    let kept = stored_request();
    let done = claim_new(&store, "x-done", LONG).await;
    assert!(store
        .complete(
            &k("x-done"),
            &done,
            &response("ok"),
            Duration::from_millis(300)
        )
        .await
        .unwrap());
    let dead = claim_new(&store, "x-dead", LONG).await;
    let parked = Failure {
        retention: Duration::from_millis(1500),
        ..failure(&kept, true, false)
    };
    assert!(store
        .fail(&k("x-dead"), &dead, &parked)
        .await
        .unwrap()
        .is_some());
    time.pass(Duration::from_millis(600)).await;
    assert!(store.get(&k("x-done")).await.unwrap().is_none());
    let record = store.get(&k("x-dead")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Dead);
    assert_eq!(record.request, Some(kept));
    time.pass(Duration::from_millis(1200)).await;
    assert!(
        store.get(&k("x-dead")).await.unwrap().is_none(),
        "and gone after its own retention"
    );
}

async fn a_trim_drops_the_listing_entries_of_expired_records(store: Store, time: Time) {
    let old = store.key("trim", "old");
    let lease = match store.claim(request(&old, SHA_A, LONG)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store
        .complete(&old, &lease, &response("ok"), Duration::from_millis(200))
        .await
        .unwrap());
    time.pass(Duration::from_millis(400)).await;
    leave(&store, "trim", "new", RecordState::Completed).await;
    store
        .trim("trim", RecordState::Completed, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(
        store.count("trim", RecordState::Completed).await.unwrap(),
        1
    );
    assert_eq!(
        all_pages(&store, &["trim"], Some(RecordState::Completed), 10).await,
        ["trim/new"]
    );
}

/// Accept `id` in `scope` as an async event (SPEC §7).
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
    store.claim(claim).await.unwrap()
}

async fn accepted_events_queue_with_their_request_until_a_worker_leases_them(
    store: Store,
    time: Time,
) {
    let kept = stored_request();
    let ttl = Duration::from_millis(400);
    assert!(matches!(
        accept(&store, "aq", "e1", &kept).await,
        ClaimOutcome::Queued
    ));
    let key = store.key("aq", "e1");
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Queued);
    assert_eq!(record.attempts, 0);
    assert_eq!(
        record.request.as_ref(),
        Some(&kept),
        "stored in the same write"
    );
    assert!(record.next_attempt_ms.is_some());
    assert!(
        matches!(
            accept(&store, "aq", "e1", &kept).await,
            ClaimOutcome::InFlight { .. }
        ),
        "a duplicate is answered, not queued again"
    );
    assert!(
        matches!(
            store.claim(request(&key, SHA_A, LONG)).await.unwrap(),
            ClaimOutcome::InFlight { .. }
        ),
        "a queued event belongs to the workers"
    );

    let due = store.lease_due("aq", 10, ttl).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].id, "e1");
    assert_eq!(due[0].lease.attempt, 1);
    assert_eq!(due[0].record.request.as_ref(), Some(&kept));
    assert_eq!(due[0].record.state, RecordState::Processing);
    assert!(
        store.lease_due("aq", 10, ttl).await.unwrap().is_empty(),
        "leased once"
    );

    // A refused attempt queues the next one, later.
    let retry = retry(&kept, Duration::from_millis(300));
    assert_eq!(
        store.fail(&key, &due[0].lease, &retry).await.unwrap(),
        Some(RecordState::Queued)
    );
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Queued);
    assert_eq!(record.last_error.unwrap().status, Some(503));
    assert!(
        store.lease_due("aq", 10, ttl).await.unwrap().is_empty(),
        "not yet"
    );
    time.pass(Duration::from_millis(500)).await;
    let due = store.lease_due("aq", 10, ttl).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].lease.attempt, 2);
    assert!(store
        .complete(&key, &due[0].lease, &response("done"), LONG)
        .await
        .unwrap());
    assert!(store.lease_due("aq", 10, ttl).await.unwrap().is_empty());
    assert!(matches!(
        accept(&store, "aq", "e1", &kept).await,
        ClaimOutcome::Completed(_)
    ));
    assert_eq!(store.count("aq", RecordState::Queued).await.unwrap(), 0);
}

async fn a_crashed_workers_lease_lapses_and_another_worker_takes_the_event(
    store: Store,
    time: Time,
) {
    let kept = stored_request();
    let ttl = Duration::from_millis(300);
    accept(&store, "al", "e1", &kept).await;
    let key = store.key("al", "e1");
    let first = store.lease_due("al", 1, ttl).await.unwrap().remove(0);
    // Renewal keeps it from the others.
    time.pass(Duration::from_millis(200)).await;
    assert!(store.renew(&key, &first.lease, ttl).await.unwrap());
    time.pass(Duration::from_millis(200)).await;
    assert!(store.lease_due("al", 1, ttl).await.unwrap().is_empty());
    // Its worker dies: the lease lapses, and the event is due again.
    time.pass(Duration::from_millis(300)).await;
    let second = store.lease_due("al", 1, ttl).await.unwrap().remove(0);
    assert_eq!(second.lease.attempt, 2);
    assert_ne!(second.lease.token, first.lease.token);
    assert!(
        !store
            .complete(&key, &first.lease, &response("stale"), LONG)
            .await
            .unwrap(),
        "the dead worker's token is fenced out"
    );
    // A release (shutdown) puts it back at once.
    assert!(store.release(&key, &second.lease).await.unwrap());
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state,
        RecordState::Queued
    );
    assert_eq!(store.lease_due("al", 1, ttl).await.unwrap().len(), 1);
}

async fn concurrent_workers_lease_each_due_event_once(store: Store, _: Time) {
    let kept = stored_request();
    for i in 0..30 {
        accept(&store, "aw", &format!("e{i}"), &kept).await;
    }
    let store = Arc::new(store);
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let due = store.lease_due("aw", 4, LONG).await.unwrap();
                    if due.is_empty() {
                        return mine;
                    }
                    mine.extend(due.into_iter().map(|due| due.id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await.unwrap());
    }
    all.sort();
    let leased = all.len();
    all.dedup();
    assert_eq!(leased, 30, "every event leased");
    assert_eq!(all.len(), 30, "each once");
}

async fn an_accepted_and_claimed_event_falls_to_the_workers_when_its_lease_lapses(
    store: Store,
    time: Time,
) {
    let kept = stored_request();
    let key = store.key("ah", "e1");
    let claim = ClaimRequest {
        mode: ClaimMode::AcceptClaimed,
        stored: Some(Stored {
            request: &kept,
            route: "orders",
            replay_of: None,
        }),
        ..request(&key, SHA_A, Duration::from_millis(300))
    };
    let lease = match store.claim(claim).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert_eq!(lease.attempt, 1);
    assert!(
        store.lease_due("ah", 5, LONG).await.unwrap().is_empty(),
        "held"
    );
    time.pass(Duration::from_millis(500)).await;
    let due = store.lease_due("ah", 5, LONG).await.unwrap();
    assert_eq!(due.len(), 1, "its holder is gone: a worker takes it");
    assert_eq!(due[0].lease.attempt, 2);
    assert_eq!(due[0].record.request.as_ref(), Some(&kept));
}

/// The controls of routes named `{run}-…`, sorted.
async fn ours(store: &Store, run: &str) -> Vec<(String, String)> {
    let mut controls: Vec<(String, String)> = (store.controls().await.unwrap().into_iter())
        .filter(|(route, _)| route.starts_with(run))
        .collect();
    controls.sort();
    controls
}

/// Route controls (a pause) are set, replaced and cleared, and every
/// gateway reading the store sees the same set.
async fn route_controls_are_kept_until_cleared(store: Store, _: Time) {
    // The shared cluster outlives a test: names of this run only.
    let run = format!("r{}", rand::random::<u32>());
    let name = |route: &str| format!("{run}-{route}");
    assert!(ours(&store, &run).await.is_empty());
    store
        .set_control(&name("a"), Some("{\"by\":\"x\"}"))
        .await
        .unwrap();
    store.set_control(&name("b"), Some("paused")).await.unwrap();
    store.set_control(&name("a"), Some("again")).await.unwrap();
    assert_eq!(
        ours(&store, &run).await,
        vec![
            (name("a"), "again".to_owned()),
            (name("b"), "paused".to_owned())
        ]
    );
    store.set_control(&name("a"), None).await.unwrap();
    store.set_control(&name("missing"), None).await.unwrap();
    assert_eq!(
        ours(&store, &run).await,
        vec![(name("b"), "paused".to_owned())]
    );
}

/// Each contract test once per backend; each backend is the `async fn` of
/// that name above (`None` skips where it cannot run, outside CI).
/// `conformance! { tests: [...], backends: [...] }`: each test, against
/// each backend, in a module of the backend's name.
macro_rules! conformance {
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

conformance! {
    tests: [
        claim_then_duplicates,
        concurrent_claims_have_one_winner,
        an_expired_holder_is_fenced_out,
        release_keeps_the_attempt_count,
        renewal_extends_the_lease,
        delete_forgets_and_retention_expires,
        a_replay_guard_links_a_body_to_its_first_key,
        a_recording_says_whether_it_kept_the_body,
        failures_keep_the_request_and_dead_letters_park,
        a_held_failure_answers_in_flight_until_its_lease_ends,
        a_claim_can_store_its_request,
        listings_page_newest_first_by_state,
        listings_of_records_changed_at_once_page_exactly,
        failed_records_outlive_completed_ones,
        a_trim_drops_the_listing_entries_of_expired_records,
        accepted_events_queue_with_their_request_until_a_worker_leases_them,
        a_crashed_workers_lease_lapses_and_another_worker_takes_the_event,
        concurrent_workers_lease_each_due_event_once,
        an_accepted_and_claimed_event_falls_to_the_workers_when_its_lease_lapses,
        route_controls_are_kept_until_cleared,
    ],
    backends: [memory, embedded, redis, cluster, postgres],
}

pub(crate) use conformance;
