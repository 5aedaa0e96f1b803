//! Redis's packed claim (`store/redis/packed.rs`), seen in Redis itself: a
//! new sync claim is one string until a script reads it, then the same
//! hash, listed, as a claim by the script; its completion, packed too
//! where the config says so, is one string, listed, that answers a
//! duplicate as it is and opens into the completed hash for any other
//! reader. (Every conformance test also runs against both: the
//! `redis_packed` and `redis_packed_completions` backends.)

use std::time::Duration;

use hookgate::config::{Backend as StoreBackend, StoreSettings};
use hookgate::store::{ClaimOutcome, Record, RecordState, RedisStore, Store, StoreKey};

use super::{claim_new, claim_new_key, request, response, LONG, SHA_A, SHA_B};
use crate::support::RedisServer;

/// A store on `redis`, packed claims on or off, and a raw connection.
async fn open(redis: &RedisServer, packed: bool) -> (Store, redis::aio::MultiplexedConnection) {
    open_with(redis, packed, false).await
}

/// The same, with packed completions on or off.
async fn open_with(
    redis: &RedisServer,
    packed: bool,
    completions: bool,
) -> (Store, redis::aio::MultiplexedConnection) {
    let settings = StoreSettings {
        packed_claims: packed,
        packed_completions: completions,
        ..StoreSettings::new(StoreBackend::Redis { url: redis.url() })
    };
    let backend = RedisStore::connect(&redis.url(), &settings).unwrap();
    let metrics = hookgate::metrics::StoreMetrics::unregistered();
    let store = Store::new(backend, "hookgate:", Duration::from_secs(2), metrics);
    let client = ::redis::Client::open(redis.url()).unwrap();
    (
        store,
        client.get_multiplexed_async_connection().await.unwrap(),
    )
}

async fn type_of(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> String {
    redis::cmd("TYPE").arg(key).query_async(raw).await.unwrap()
}

async fn pttl(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(raw).await.unwrap()
}

async fn redis_ms(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(raw).await.unwrap();
    s * 1000 + us / 1000
}

#[tokio::test]
async fn a_packed_claim_is_one_string_until_read_then_the_usual_record() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let (store, mut raw) = open(&redis, true).await;
    let key = store.key("pk", "evt_1");
    let ttl = Duration::from_secs(30);
    let before = redis_ms(&mut raw).await;
    let lease = match store
        .records()
        .claim(request(&key, SHA_A, ttl))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert_eq!(lease.attempt, 1);
    assert_eq!(type_of(&mut raw, key.as_str()).await, "string");
    assert_eq!(
        store
            .listing()
            .count("pk", RecordState::Processing)
            .await
            .unwrap(),
        0
    );
    // Its retention is the key's expiry from the start.
    let expiry = pttl(&mut raw, key.as_str()).await;
    assert!(expiry > 500_000, "the retention (600 s), got {expiry} ms");

    // Read: opened in place, listed, its lease by Redis's clock.
    let record = store.records().get(&key).await.unwrap().unwrap();
    let after = redis_ms(&mut raw).await;
    assert_eq!(record.state, RecordState::Processing);
    assert_eq!(record.attempts, 1);
    assert_eq!(record.body_sha256, SHA_A);
    let until = record.lease_expires_at_ms.unwrap();
    assert!(
        until + 50 >= before + 30_000 && until <= after + 30_000 + 50,
        "lease end {until} against Redis's clock {before}..{after} + 30 s"
    );
    assert_eq!(type_of(&mut raw, key.as_str()).await, "hash");
    assert_eq!(
        store
            .listing()
            .count("pk", RecordState::Processing)
            .await
            .unwrap(),
        1
    );
    let expiry = pttl(&mut raw, key.as_str()).await;
    assert!(expiry > 500_000, "the expiry is kept, got {expiry} ms");

    // A duplicate is in flight until the lease ends; the holder completes.
    match store
        .records()
        .claim(request(&key, SHA_B, ttl))
        .await
        .unwrap()
    {
        ClaimOutcome::InFlight { retry_after } => assert!(retry_after > Duration::from_secs(20)),
        other => panic!("{other:?}"),
    }
    assert!(store
        .records()
        .complete(&key, &lease, &response("ok"), LONG)
        .await
        .unwrap());
    assert!(matches!(
        store
            .records()
            .claim(request(&key, SHA_A, ttl))
            .await
            .unwrap(),
        ClaimOutcome::Completed(_)
    ));
    assert_eq!(
        store
            .listing()
            .count("pk", RecordState::Completed)
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn a_packed_claim_completes_straight_into_a_listed_record() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let (store, mut raw) = open(&redis, true).await;
    let key = store.key("pk", "evt_2");
    let lease = claim_new_key(&store, &key, LONG).await;
    assert_eq!(type_of(&mut raw, key.as_str()).await, "string");
    let mut wrong = lease.clone();
    wrong.token = "0".repeat(32);
    assert!(!store
        .records()
        .complete(&key, &wrong, &response("no"), LONG)
        .await
        .unwrap());
    let (before, after) = complete_ok(&store, &mut raw, &key, &lease).await;
    let record = store.records().get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!((record.attempts, record.body_sha256.as_str()), (1, SHA_A));
    // Stamped with Redis's time as the gateway read it, not by a `TIME` in
    // the script: off by a one-way trip at most.
    let completed = record
        .completed_at_ms
        .expect("a completed record says when");
    assert!(
        (before.saturating_sub(50)..=after + 50).contains(&completed),
        "completed at {completed}, Redis's clock read {before}..{after}"
    );
    assert_eq!(
        store
            .listing()
            .count("pk", RecordState::Completed)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .listing()
            .count("pk", RecordState::Processing)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn without_the_setting_every_claim_is_a_hash() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let (store, mut raw) = open(&redis, false).await;
    claim_new(&store, "evt_3", LONG).await;
    let key = super::k("evt_3");
    assert_eq!(type_of(&mut raw, key.as_str()).await, "hash");
}

#[tokio::test]
async fn a_packed_completion_is_one_string_that_answers_then_opens_into_the_record() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let (store, mut raw) = open_with(&redis, true, true).await;
    let key = store.key("pk", "evt_4");
    let lease = claim_new_key(&store, &key, LONG).await;
    let (before, after) = complete_ok(&store, &mut raw, &key, &lease).await;
    // One string, its expiry the retention, listed as completed at once.
    assert_eq!(type_of(&mut raw, key.as_str()).await, "string");
    let held: Vec<u8> = redis::cmd("GET")
        .arg(key.as_str())
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(held.starts_with(b"p2:201:whole:1:"), "{held:?}");
    let expiry = pttl(&mut raw, key.as_str()).await;
    assert!(expiry > 50_000, "the retention (60 s), got {expiry} ms");
    // (Counted in Redis: the store's count opens the oldest it meets.)
    let listed: u64 = redis::cmd("ZCARD")
        .arg(format!("{}!completed", key.source()))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(listed, 1);

    // A duplicate is answered from it, and it stays a string.
    let duplicate = answered(&store, &key, SHA_B).await;
    let replayed = duplicate.response.as_ref().unwrap();
    assert_eq!(replayed.status.as_u16(), 201);
    assert_eq!(replayed.headers["content-type"], "text/plain");
    assert_eq!(&replayed.body[..], b"ok");
    assert_eq!(duplicate.body_sha256, SHA_A);
    let at = duplicate.completed_at_ms.unwrap();
    assert!(
        (before.saturating_sub(50)..=after + 50).contains(&at),
        "completed at {at}, Redis's clock read {before}..{after}"
    );
    assert_eq!(type_of(&mut raw, key.as_str()).await, "string");

    // Any other reader opens it: the same record, a hash, its expiry kept,
    // listed once; a duplicate then goes through the claim script alike.
    let read = store.records().get(&key).await.unwrap().unwrap();
    assert_eq!(type_of(&mut raw, key.as_str()).await, "hash");
    assert_eq!(read.state, RecordState::Completed);
    assert_eq!(
        (read.attempts, read.completed_at_ms, read.first_seen_ms),
        (1, Some(at), duplicate.first_seen_ms)
    );
    assert_eq!(read.response, duplicate.response);
    let expiry = pttl(&mut raw, key.as_str()).await;
    assert!(expiry > 50_000, "the expiry is kept, got {expiry} ms");
    let completed = store.listing().count("pk", RecordState::Completed).await;
    assert_eq!(completed.unwrap(), 1);
    let again = answered(&store, &key, SHA_A).await;
    assert_eq!(again.response, duplicate.response);
}

/// A duplicate of `key` with body `sha`: the completed record that answers
/// it.
async fn answered(store: &Store, key: &StoreKey, sha: &str) -> Record {
    match store
        .records()
        .claim(request(key, sha, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::Completed(record) => record,
        other => panic!("{other:?}"),
    }
}

/// Complete `key` under `lease` with "ok": Redis's clock read before and
/// after.
async fn complete_ok(
    store: &Store,
    raw: &mut redis::aio::MultiplexedConnection,
    key: &StoreKey,
    lease: &hookgate::store::Lease,
) -> (u64, u64) {
    let before = redis_ms(raw).await;
    let records = store.records();
    assert!(records
        .complete(key, lease, &response("ok"), LONG)
        .await
        .unwrap());
    (before, redis_ms(raw).await)
}
