//! A scope spread over shards (the store's `with_shards`): an event's
//! record, its queue entry and its body's guard land in the shard their
//! key names, and everything that spans the scope — listings and their
//! cursors, counts, the oldest-record gauges, the queue — visits every
//! shard, each record once. Run on memory, embedded, one Redis and a Redis
//! Cluster laid out in shards; PostgreSQL keeps a scope whole.

use std::collections::BTreeSet;

use hookgate::store::{ClaimOutcome, ClaimRequest, RecordState, Store};

use super::listing::leave;
#[allow(unused_imports)]
use super::*;

const SHARDS: u16 = 8;

fn scope() -> String {
    format!("s{}", rand::random::<u32>())
}

/// 60 completed, 12 dead and 10 queued events over 8 shards: a listing of
/// 7 a page walks each exactly once, counts and the oldest add up across
/// shards, and the workers lease every queued event once.
async fn every_view_of_a_scope_merges_its_shards(store: Store, _: Time) {
    let store = store.with_shards(SHARDS);
    assert_eq!(store.shards(), SHARDS);
    let scope = scope();
    let mut made = BTreeSet::new();
    for (state, n) in [
        (RecordState::Completed, 60),
        (RecordState::Dead, 12),
        (RecordState::Queued, 10),
    ] {
        for i in 0..n {
            let id = format!("{}-{i}", state.as_str());
            leave(&store, &scope, &id, state).await;
            made.insert(id);
        }
    }
    let namespaces: BTreeSet<String> = (made.iter())
        .map(|id| store.key(&scope, id).source().to_owned())
        .collect();
    assert_eq!(namespaces.len(), usize::from(SHARDS), "{namespaces:?}");

    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .listing()
            .list(&[&scope], None, 7, cursor.as_ref())
            .await
            .unwrap();
        seen.extend(page.records.iter().map(|listed| listed.id.clone()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(seen.len(), unique.len(), "a record listed twice");
    assert_eq!(unique, made);

    assert_eq!(
        store
            .listing()
            .count(&scope, RecordState::Completed)
            .await
            .unwrap(),
        60
    );
    assert_eq!(
        store
            .listing()
            .count(&scope, RecordState::Dead)
            .await
            .unwrap(),
        12
    );
    assert_eq!(
        store
            .listing()
            .count(&scope, RecordState::Queued)
            .await
            .unwrap(),
        10
    );
    let first_dead = store
        .records()
        .get(&store.key(&scope, "dead-0"))
        .await
        .unwrap()
        .unwrap();
    let oldest = store
        .listing()
        .oldest(&scope, RecordState::Dead)
        .await
        .unwrap();
    assert!(oldest.is_some_and(|at| at <= first_dead.updated_ms));

    let mut leased = BTreeSet::new();
    for _ in 0..20 {
        for due in store.queue().lease_due(&scope, 3, LONG).await.unwrap() {
            assert!(leased.insert(due.id.clone()), "{} leased twice", due.id);
        }
    }
    let queued: BTreeSet<String> = (0..10).map(|i| format!("queued-{i}")).collect();
    assert_eq!(leased, queued);
}

/// The replay guard lives in its body's shard, so a new id in another
/// shard with the same body is answered by the first delivery's record.
async fn a_guard_answers_across_shards(store: Store, _: Time) {
    let store = store.with_shards(SHARDS);
    let scope = scope();
    let body = "f00dbabe";
    let first = store.key(&scope, "first");
    let (other_id, other) = (0..)
        .map(|i| format!("other-{i}"))
        .map(|id| (id.clone(), store.key(&scope, &id)))
        .find(|(_, key)| key.source() != first.source())
        .unwrap();
    let guard = store.guard_key(&scope, body);
    let claim = |key| ClaimRequest {
        guard_key: Some(&guard),
        ..request(key, body, LONG)
    };
    let lease = match store.records().claim(claim(&first)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store
        .records()
        .complete(&first, &lease, &response("first"), LONG)
        .await
        .unwrap());
    match store.records().claim(claim(&other)).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.response.unwrap().body, "first", "{other_id}")
        }
        outcome => panic!("{other_id}: {outcome:?}"),
    }
}

/// Sixteen ids of one body claimed at once, spread over the shards: one
/// is claimed, every other answers in flight; after it fails, a retry of
/// another id takes the body over, and the first id's retry is then in
/// flight beside it rather than claimed.
async fn racing_ids_of_one_body_claim_it_once(store: Store, _: Time) {
    let store = std::sync::Arc::new(store.with_shards(SHARDS));
    let scope = scope();
    let body = "racing-body";
    let guard = store.guard_key(&scope, body);
    let claims = (0..16).map(|i| {
        let (store, scope, guard) = (store.clone(), scope.clone(), guard.clone());
        tokio::spawn(async move {
            let key = store.key(&scope, &format!("id-{i}"));
            let request = ClaimRequest {
                guard_key: Some(&guard),
                ..request(&key, body, LONG)
            };
            (key.clone(), store.records().claim(request).await.unwrap())
        })
    });
    let mut won = Vec::new();
    for claim in claims {
        match claim.await.unwrap() {
            (key, ClaimOutcome::New(lease)) => won.push((key, lease)),
            (_, ClaimOutcome::InFlight { .. }) => {}
            (key, other) => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(won.len(), 1, "one body claimed under {} ids", won.len());
    let (first, lease) = won.pop().unwrap();
    let stored = stored_request();
    let refused = failure(&stored, false, false);
    let failed = store
        .records()
        .fail(&first, &lease, &refused)
        .await
        .unwrap();
    assert_eq!(failed, Some(RecordState::Failed));
    let other = (0..16)
        .map(|i| store.key(&scope, &format!("id-{i}")))
        .find(|key| *key != first)
        .unwrap();
    let retry = |key| ClaimRequest {
        guard_key: Some(&guard),
        ..request(key, body, LONG)
    };
    assert!(matches!(
        store.records().claim(retry(&other)).await.unwrap(),
        ClaimOutcome::New(_)
    ));
    assert!(matches!(
        store.records().claim(retry(&first)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
}

conformance! {
    tests: [
        every_view_of_a_scope_merges_its_shards,
        a_guard_answers_across_shards,
        racing_ids_of_one_body_claim_it_once,
    ],
    backends: [memory, embedded, redis, cluster_eight],
}

/// A Redis Cluster store laid out in 8 shards: the guard checked in steps
/// of its own (`store/redis/guard.rs`), since a body's guard and a key are
/// in two slots.
async fn cluster_eight() -> Option<Opened> {
    cluster_sharded(SHARDS).await
}

/// PostgreSQL keeps each scope in one namespace whatever it is asked.
async fn a_scope_on_postgres_stays_whole(store: Store, _: Time) {
    let store = store.with_shards(SHARDS);
    assert_eq!(store.shards(), 1);
    assert_eq!(store.key("s", "evt").source(), "hookgate:s");
}

conformance! {
    tests: [a_scope_on_postgres_stays_whole],
    backends: [postgres],
}
