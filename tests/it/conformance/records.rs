//! The [`Records`](hookgate::store::Records) capability: claims under
//! fencing tokens, renewal, completion, failures and dead letters, release,
//! forgetting, retention and the replay guard — on every backend.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use hookgate::store::{
    AttemptKind, ClaimOutcome, ClaimRequest, Deleted, Failure, FailureClass, PastAttempt,
    RecordState, Store, Stored,
};

#[allow(unused_imports)]
use super::*;

async fn claim_then_duplicates(store: Store, _: Time) {
    let lease = claim_new(&store, "k1", LONG).await;
    assert_eq!(lease.attempt, 1);
    match store
        .records()
        .claim(request(&k("k1"), SHA_A, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::InFlight { retry_after } => {
            assert!(retry_after >= Duration::from_secs(50), "{retry_after:?}")
        }
        other => panic!("expected in flight, got {other:?}"),
    }
    let record = store.records().get(&k("k1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Processing);
    assert!(record.lease_expires_at_ms.is_some());

    assert!(store
        .records()
        .complete(&k("k1"), &lease, &response("done"), LONG)
        .await
        .unwrap());
    match store
        .records()
        .claim(request(&k("k1"), SHA_B, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.state, RecordState::Completed);
            assert_eq!(record.body_sha256, SHA_A, "the first body's hash is kept");
            assert_eq!(record.attempts, 1);
            assert!(record.completed_at_ms.unwrap() >= record.first_seen_ms);
            assert_eq!(record.response.unwrap(), response("done"));
        }
        other => panic!("expected completed, got {other:?}"),
    }
    assert!(store.records().get(&k("missing")).await.unwrap().is_none());
    store.ping().await.unwrap();
}

/// 40 contenders claim the same 25 keys at once, half of them in the
/// opposite order: every claim is answered (no store error: a store that
/// locked keys in the order they came could deadlock), one wins each key.
async fn concurrent_claims_have_one_winner(store: Store, _: Time) {
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for contender in 0..40 {
        for key in 0..25 {
            let store = Arc::clone(&store);
            let key = if contender % 2 == 0 { key } else { 24 - key };
            tasks.push(tokio::spawn(async move {
                let key = k(&format!("race-{key}"));
                match store
                    .records()
                    .claim(request(&key, SHA_A, LONG))
                    .await
                    .unwrap()
                {
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
        store
            .records()
            .claim(request(&k("k2"), SHA_B, LONG))
            .await
            .unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    time.pass(Duration::from_millis(300)).await;
    let successor = match store
        .records()
        .claim(request(&k("k2"), SHA_B, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("the lapsed lease is taken over, got {other:?}"),
    };
    assert_eq!(successor.attempt, 2);
    assert_ne!(successor.token, old.token);

    assert!(!store.records().renew(&k("k2"), &old, LONG).await.unwrap());
    assert!(!store
        .records()
        .complete(&k("k2"), &old, &response("stale"), LONG)
        .await
        .unwrap());
    assert!(!store.records().release(&k("k2"), &old).await.unwrap());
    let record = store.records().get(&k("k2")).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::Processing,
        "the successor's claim is untouched"
    );
    assert_eq!(record.body_sha256, SHA_B);

    assert!(store
        .records()
        .complete(&k("k2"), &successor, &response("fresh"), LONG)
        .await
        .unwrap());
    let record = store.records().get(&k("k2")).await.unwrap().unwrap();
    assert_eq!(record.response.unwrap().body, "fresh");
    assert_eq!(record.attempts, 2);
}

async fn release_keeps_the_attempt_count(store: Store, _: Time) {
    let first = claim_new(&store, "k3", LONG).await;
    assert!(store.records().release(&k("k3"), &first).await.unwrap());
    let record = store.records().get(&k("k3")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Failed);
    assert_eq!(record.attempts, 1);

    let second = claim_new(&store, "k3", LONG).await;
    assert_eq!(second.attempt, 2);
    assert!(
        !store.records().release(&k("k3"), &first).await.unwrap(),
        "an old token cannot release"
    );
    assert!(!store
        .records()
        .complete(&k("k3"), &first, &response("x"), LONG)
        .await
        .unwrap());
    assert!(store
        .records()
        .complete(&k("k3"), &second, &response("ok"), LONG)
        .await
        .unwrap());
    assert!(
        !store.records().release(&k("k3"), &second).await.unwrap(),
        "a completed record stays completed"
    );
}

async fn renewal_extends_the_lease(store: Store, time: Time) {
    let ttl = Duration::from_millis(300);
    let lease = claim_new(&store, "k4", ttl).await;
    for _ in 0..6 {
        time.pass(Duration::from_millis(100)).await;
        assert!(store.records().renew(&k("k4"), &lease, ttl).await.unwrap());
    }
    // 600 ms after a 300 ms claim: still ours thanks to renewal.
    assert!(matches!(
        store
            .records()
            .claim(request(&k("k4"), SHA_A, ttl))
            .await
            .unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
}

async fn delete_forgets_and_retention_expires(store: Store, time: Time) {
    let lease = claim_new(&store, "k5", LONG).await;
    assert!(store
        .records()
        .complete(&k("k5"), &lease, &response("done"), LONG)
        .await
        .unwrap());
    assert_eq!(
        store.records().delete(&k("k5"), false).await.unwrap(),
        Deleted::Deleted
    );
    assert_eq!(
        store.records().delete(&k("k5"), false).await.unwrap(),
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
        store.records().delete(&k("k9"), false).await.unwrap(),
        Deleted::InFlight
    );
    assert!(store.records().get(&k("k9")).await.unwrap().is_some());
    assert_eq!(
        store.records().delete(&k("k9"), true).await.unwrap(),
        Deleted::Deleted
    );
    // A claim whose lease lapsed (its holder died) is.
    claim_new(&store, "k10", Duration::from_millis(100)).await;
    time.pass(Duration::from_millis(200)).await;
    assert_eq!(
        store.records().delete(&k("k10"), false).await.unwrap(),
        Deleted::Deleted
    );

    let lease = claim_new(&store, "k6", LONG).await;
    assert!(store
        .records()
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
        store.records().get(&k("k6")).await.unwrap().is_none(),
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
    let first = match store.records().claim(guarded(1, 1)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        store.records().claim(guarded(2, 1)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    assert!(store
        .records()
        .complete(&keys[1], &first, &response("first"), LONG)
        .await
        .unwrap());
    match store.records().claim(guarded(2, 1)).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(record.response.unwrap().body, "first"),
        other => panic!("the same body under a new key is a duplicate: {other:?}"),
    }
    assert!(
        store.records().get(&keys[2]).await.unwrap().is_none(),
        "the forged key is not recorded"
    );
    assert!(matches!(
        store.records().claim(guarded(3, 2)).await.unwrap(),
        ClaimOutcome::New(_)
    ));

    // A released first claim does not block the body: the next key forwards.
    let released = match store.records().claim(guarded(4, 3)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store.records().release(&keys[4], &released).await.unwrap());
    let second = match store.records().claim(guarded(5, 3)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    // Once the body completed under the second key, the first key's retry
    // is a duplicate of it, though that key exists (released).
    assert!(store
        .records()
        .complete(&keys[5], &second, &response("second"), LONG)
        .await
        .unwrap());
    match store.records().claim(guarded(4, 3)).await.unwrap() {
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
            .records()
            .complete(&k(key), &lease, &recorded, LONG)
            .await
            .unwrap());
        let record = store.records().get(&k(key)).await.unwrap().unwrap();
        assert_eq!(record.response.unwrap(), recorded);
    }
}

async fn failures_keep_the_request_and_dead_letters_park(store: Store, _: Time) {
    let kept = stored_request();
    let first = claim_new(&store, "f1", LONG).await;
    assert_eq!(
        store
            .records()
            .fail(&k("f1"), &first, &failure(&kept, false, false))
            .await
            .unwrap(),
        Some(RecordState::Failed)
    );
    let record = store.records().get(&k("f1")).await.unwrap().unwrap();
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
            .records()
            .fail(&k("f1"), &first, &failure(&kept, true, false))
            .await
            .unwrap()
            .is_none(),
        "a spent token records nothing"
    );

    // The sender's retry claims it again; the second failure parks it.
    let second = claim_new(&store, "f1", LONG).await;
    assert_eq!(second.attempt, 2);
    let record = store.records().get(&k("f1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Processing);
    assert_eq!(record.request.as_ref(), Some(&kept), "kept while retried");
    assert_eq!(
        store
            .records()
            .fail(&k("f1"), &second, &failure(&kept, true, false))
            .await
            .unwrap(),
        Some(RecordState::Dead)
    );
    match store
        .records()
        .claim(request(&k("f1"), SHA_A, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::Dead(record) => {
            assert_eq!(record.state, RecordState::Dead);
            assert_eq!(record.attempts, 2);
        }
        other => panic!("a dead letter answers dead, got {other:?}"),
    }

    // An operator's redelivery claims a dead letter, same key.
    let third = match store
        .records()
        .claim(redeliver(&k("f1"), false))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("a redelivery claims a dead letter, got {other:?}"),
    };
    assert_eq!(third.attempt, 3);
    assert!(store
        .records()
        .complete(&k("f1"), &third, &response("at last"), LONG)
        .await
        .unwrap());
    let record = store.records().get(&k("f1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.response, Some(response("at last")));
    assert!(
        matches!(
            store
                .records()
                .claim(redeliver(&k("f1"), false))
                .await
                .unwrap(),
            ClaimOutcome::Completed(_)
        ),
        "a completed record is redelivered only when forced"
    );
    match store
        .records()
        .claim(redeliver(&k("f1"), true))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => assert_eq!(lease.attempt, 4),
        other => panic!("a forced redelivery claims a completed record, got {other:?}"),
    }
    assert!(
        matches!(
            store
                .records()
                .claim(redeliver(&k("f1"), true))
                .await
                .unwrap(),
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
        store
            .records()
            .fail(&k("h1"), &lease, &unknown)
            .await
            .unwrap(),
        Some(RecordState::Failed)
    );
    let record = store.records().get(&k("h1")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Failed);
    assert_eq!(record.last_error.unwrap().class, FailureClass::Unknown);
    assert!(matches!(
        store
            .records()
            .claim(request(&k("h1"), SHA_A, LONG))
            .await
            .unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    assert!(matches!(
        store
            .records()
            .claim(redeliver(&k("h1"), true))
            .await
            .unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    assert_eq!(
        store.records().delete(&k("h1"), false).await.unwrap(),
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
    let lease = match store.records().claim(claim).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store
        .records()
        .complete(&key, &lease, &response("replayed"), LONG)
        .await
        .unwrap());
    let record = store.records().get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.request, Some(kept));
    assert_eq!(record.replay_of.as_deref(), Some("r1"));
    assert_eq!(record.route.as_deref(), Some("stripe"));
}

async fn failed_records_outlive_completed_ones(store: Store, time: Time) {
    let kept = stored_request();
    let done = claim_new(&store, "x-done", LONG).await;
    assert!(store
        .records()
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
        .records()
        .fail(&k("x-dead"), &dead, &parked)
        .await
        .unwrap()
        .is_some());
    time.pass(Duration::from_millis(600)).await;
    assert!(store.records().get(&k("x-done")).await.unwrap().is_none());
    let record = store.records().get(&k("x-dead")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Dead);
    assert_eq!(record.request, Some(kept));
    time.pass(Duration::from_millis(1200)).await;
    assert!(
        store.records().get(&k("x-dead")).await.unwrap().is_none(),
        "and gone after its own retention"
    );
}

/// Each failure adds its attempt to the record's history, the last ten
/// kept, newest last; a completion keeps what came before and adds
/// nothing; listings leave it out.
async fn a_record_keeps_its_last_ten_failed_attempts(store: Store, _: Time) {
    let kept = stored_request();
    let mut last = None;
    for n in 1..=12u64 {
        let lease = claim_new(&store, "h10", LONG).await;
        let tried = PastAttempt::new(
            1_700_000_000_000 + n,
            if n % 2 == 0 {
                AttemptKind::Sender
            } else {
                AttemptKind::Operator
            },
            FailureClass::NotDelivered,
            None,
            n,
            Some(format!("connection refused, attempt {n}\nsecond line")),
            &[],
        );
        let failed = Failure {
            class: FailureClass::NotDelivered,
            status: None,
            attempt: &tried,
            ..failure(&kept, false, false)
        };
        store
            .records()
            .fail(&k("h10"), &lease, &failed)
            .await
            .unwrap()
            .unwrap();
        last = Some((lease, tried));
    }
    let record = store.records().get(&k("h10")).await.unwrap().unwrap();
    assert_eq!(record.history.len(), 10, "{:?}", record.history);
    assert_eq!(
        record.history[0].at, 1_700_000_000_003,
        "the oldest two went"
    );
    let (_, newest) = last.unwrap();
    assert_eq!(record.history[9], newest, "field for field");
    assert_eq!(
        record.history[9].error.as_deref(),
        Some("connection refused, attempt 12\nsecond line")
    );

    let lease = claim_new(&store, "h10", LONG).await;
    store
        .records()
        .fail(&k("h10"), &lease, &failure(&kept, false, false))
        .await
        .unwrap();
    let record = store.records().get(&k("h10")).await.unwrap().unwrap();
    assert_eq!(record.history[9], *REFUSED);
    assert_eq!(
        record.history[9].body.as_deref(),
        Some(r#"{"error":"orders DB: connection pool exhausted"}"#)
    );
    let lease = claim_new(&store, "h10", LONG).await;
    assert!(store
        .records()
        .complete(&k("h10"), &lease, &response("ok"), LONG)
        .await
        .unwrap());
    let record = store.records().get(&k("h10")).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.history.len(), 10, "a completion keeps the evidence");

    let done = claim_new(&store, "h-clean", LONG).await;
    assert!(store
        .records()
        .complete(&k("h-clean"), &done, &response("ok"), LONG)
        .await
        .unwrap());
    let clean = store.records().get(&k("h-clean")).await.unwrap().unwrap();
    assert!(clean.history.is_empty(), "a success writes no history");
}

conformance! {
    tests: [
        a_record_keeps_its_last_ten_failed_attempts,
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
        failed_records_outlive_completed_ones,
    ],
}
