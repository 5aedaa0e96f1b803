//! The record's life, one set of rules for every entrance (docs/operations/fleets.md,
//! "The record's life"), as the store holds it on every backend: an
//! accepted event is never stranded whatever entrance held it, a worker
//! never leases a record another holder has, and an operator's action on a
//! queued event leaves it to its queue.

use std::time::Duration;

use hookgate::store::{ClaimMode, ClaimOutcome, ClaimRequest, Deleted, RecordState, Store};

#[allow(unused_imports)]
use super::*;

/// The record of `id` in `scope`.
async fn state(store: &Store, scope: &str, id: &str) -> RecordState {
    store
        .records()
        .get(&store.key(scope, id))
        .await
        .unwrap()
        .expect("the record")
        .state
}

/// Defect: a failed sync record met by an async acceptance was answered
/// "replayed" and never delivered. Now it is queued, due now.
async fn an_acceptance_of_a_failed_record_queues_it_due_now(store: Store, _: Time) {
    let kept = stored_request();
    let key = store.key("rl-f", "e1");
    let lease = match store
        .records()
        .claim(request(&key, SHA_A, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    let failed = failure(&kept, false, false);
    assert_eq!(
        store.records().fail(&key, &lease, &failed).await.unwrap(),
        Some(RecordState::Failed)
    );
    assert!(matches!(
        accept(&store, "rl-f", "e1", &kept).await,
        ClaimOutcome::Queued
    ));
    let record = store.records().get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Queued);
    assert!(record.accepted);
    assert_eq!(record.attempts, 1, "the attempt made is kept");
    let due = store.queue().lease_due("rl-f", 10, LONG).await.unwrap();
    assert_eq!(due.len(), 1, "its workers take it");
    assert_eq!(due[0].lease.attempt, 2);
}

/// An acceptance meeting a sync holder's live claim: the holder's failure
/// queues the event instead of leaving it failed.
async fn an_acceptance_meeting_a_sync_holder_makes_its_failure_queue(store: Store, time: Time) {
    let kept = stored_request();
    let key = store.key("rl-a", "e1");
    let lease = match store
        .records()
        .claim(request(&key, SHA_A, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        accept(&store, "rl-a", "e1", &kept).await,
        ClaimOutcome::InFlight { .. }
    ));
    assert!(
        store
            .queue()
            .lease_due("rl-a", 10, LONG)
            .await
            .unwrap()
            .is_empty(),
        "never beside the live holder"
    );
    let failed = retry(&kept, Duration::from_millis(50));
    assert_eq!(
        store.records().fail(&key, &lease, &failed).await.unwrap(),
        Some(RecordState::Queued)
    );
    time.pass(Duration::from_millis(200)).await;
    assert_eq!(
        store
            .queue()
            .lease_due("rl-a", 10, LONG)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// Defect (Redis): a claim of a worker's lapsed record left its due entry,
/// so the next pass leased it beside the new holder. Every entrance's claim
/// keeps an accepted record owed to its queue, due only when that claim's
/// lease ends.
async fn a_takeover_of_an_accepted_record_is_never_leased_beside_its_holder(
    store: Store,
    time: Time,
) {
    let kept = stored_request();
    let short = Duration::from_millis(300);
    accept(&store, "rl-t", "e1", &kept).await;
    let key = store.key("rl-t", "e1");
    let worker = store
        .queue()
        .lease_due("rl-t", 1, short)
        .await
        .unwrap()
        .remove(0);
    time.pass(Duration::from_millis(500)).await; // the worker died
    for mode in [ClaimMode::Deliver, ClaimMode::Redeliver { force: false }] {
        let claim = ClaimRequest {
            mode,
            ..request(&key, SHA_A, LONG)
        };
        let lease = match store.records().claim(claim).await.unwrap() {
            ClaimOutcome::New(lease) => lease,
            other => panic!("{mode:?}: {other:?}"),
        };
        assert_ne!(lease.token, worker.lease.token);
        assert!(
            store
                .queue()
                .lease_due("rl-t", 10, short)
                .await
                .unwrap()
                .is_empty(),
            "{mode:?}: a worker leased it beside its holder"
        );
        // Whatever ends that holder, the event is due again.
        assert!(store.records().release(&key, &lease).await.unwrap());
        assert_eq!(state(&store, "rl-t", "e1").await, RecordState::Queued);
        // A worker takes it up again, and dies too.
        assert_eq!(
            store
                .queue()
                .lease_due("rl-t", 1, short)
                .await
                .unwrap()
                .len(),
            1
        );
        time.pass(Duration::from_millis(500)).await;
    }
}

/// Defect: SIGTERM (a release) during an operator's redelivery of an
/// accepted dead letter left it failed for good; it goes back to its queue.
async fn a_released_redelivery_of_an_accepted_dead_letter_is_queued(store: Store, _: Time) {
    let kept = stored_request();
    accept(&store, "rl-d", "e1", &kept).await;
    let key = store.key("rl-d", "e1");
    let worker = store
        .queue()
        .lease_due("rl-d", 1, LONG)
        .await
        .unwrap()
        .remove(0);
    let dead = failure(&kept, true, false);
    assert_eq!(
        store
            .records()
            .fail(&key, &worker.lease, &dead)
            .await
            .unwrap(),
        Some(RecordState::Dead)
    );
    let lease = match store.records().claim(redeliver(&key, false)).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store.records().release(&key, &lease).await.unwrap());
    assert_eq!(state(&store, "rl-d", "e1").await, RecordState::Queued);
    assert_eq!(
        store
            .queue()
            .lease_due("rl-d", 10, LONG)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// An operator's redelivery of a queued event makes it due now, for its
/// workers, instead of being refused.
async fn a_redelivery_of_a_queued_event_makes_it_due_now(store: Store, _: Time) {
    let kept = stored_request();
    accept(&store, "rl-q", "e1", &kept).await;
    let key = store.key("rl-q", "e1");
    let worker = store
        .queue()
        .lease_due("rl-q", 1, LONG)
        .await
        .unwrap()
        .remove(0);
    let later = retry(&kept, LONG);
    assert_eq!(
        store
            .records()
            .fail(&key, &worker.lease, &later)
            .await
            .unwrap(),
        Some(RecordState::Queued)
    );
    assert!(store
        .queue()
        .lease_due("rl-q", 10, LONG)
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        store.records().claim(redeliver(&key, false)).await.unwrap(),
        ClaimOutcome::Queued
    ));
    assert_eq!(
        store
            .queue()
            .lease_due("rl-q", 10, LONG)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// Defect (embedded, Redis, PostgreSQL): a `DELETE` without force dropped
/// a queued event its sender was told was accepted.
async fn a_queued_event_is_forgotten_only_when_forced(store: Store, _: Time) {
    let kept = stored_request();
    accept(&store, "rl-x", "e1", &kept).await;
    let key = store.key("rl-x", "e1");
    assert_eq!(
        store.records().delete(&key, false).await.unwrap(),
        Deleted::InFlight
    );
    assert_eq!(state(&store, "rl-x", "e1").await, RecordState::Queued);
    assert_eq!(
        store.records().delete(&key, true).await.unwrap(),
        Deleted::Deleted
    );
    assert!(store.records().get(&key).await.unwrap().is_none());
}

conformance! {
    tests: [
        an_acceptance_of_a_failed_record_queues_it_due_now,
        an_acceptance_meeting_a_sync_holder_makes_its_failure_queue,
        a_takeover_of_an_accepted_record_is_never_leased_beside_its_holder,
        a_released_redelivery_of_an_accepted_dead_letter_is_queued,
        a_redelivery_of_a_queued_event_makes_it_due_now,
        a_queued_event_is_forgotten_only_when_forced,
    ],
}
