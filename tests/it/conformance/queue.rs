//! The [`Queue`](hookgate::store::Queue) capability: accepted events leased
//! to workers once each, a crashed worker's lease lapsing to another —
//! on every backend (the record's life across entrances is `life.rs`).

use std::sync::Arc;
use std::time::Duration;

use hookgate::store::{ClaimMode, ClaimOutcome, ClaimRequest, RecordState, Store, Stored};

#[allow(unused_imports)]
use super::*;

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
    let record = store.records().get(&key).await.unwrap().unwrap();
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
            store
                .records()
                .claim(request(&key, SHA_A, LONG))
                .await
                .unwrap(),
            ClaimOutcome::InFlight { .. }
        ),
        "a queued event belongs to the workers"
    );

    let due = store.queue().lease_due("aq", 10, ttl).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].id, "e1");
    assert_eq!(due[0].lease.attempt, 1);
    assert_eq!(due[0].record.request.as_ref(), Some(&kept));
    assert_eq!(due[0].record.state, RecordState::Processing);
    assert!(
        store
            .queue()
            .lease_due("aq", 10, ttl)
            .await
            .unwrap()
            .is_empty(),
        "leased once"
    );

    // A refused attempt queues the next one, later.
    let retry = retry(&kept, Duration::from_millis(300));
    assert_eq!(
        store
            .records()
            .fail(&key, &due[0].lease, &retry)
            .await
            .unwrap(),
        Some(RecordState::Queued)
    );
    let record = store.records().get(&key).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Queued);
    assert_eq!(record.last_error.unwrap().status, Some(503));
    assert!(
        store
            .queue()
            .lease_due("aq", 10, ttl)
            .await
            .unwrap()
            .is_empty(),
        "not yet"
    );
    time.pass(Duration::from_millis(500)).await;
    let due = store.queue().lease_due("aq", 10, ttl).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].lease.attempt, 2);
    assert!(store
        .records()
        .complete(&key, &due[0].lease, &response("done"), LONG)
        .await
        .unwrap());
    assert!(store
        .queue()
        .lease_due("aq", 10, ttl)
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        accept(&store, "aq", "e1", &kept).await,
        ClaimOutcome::Completed(_)
    ));
    assert_eq!(
        store
            .listing()
            .count("aq", RecordState::Queued)
            .await
            .unwrap(),
        0
    );
}

/// `hookgate_oldest_queued_seconds` counts from acceptance: a failed
/// attempt, which changes the record, does not restart it, nor does its
/// retry's lease; an event on its first attempt is not waiting, nor is a
/// delivered one.
async fn the_oldest_queued_event_is_measured_from_its_acceptance(store: Store, time: Time) {
    let kept = stored_request();
    assert_eq!(
        store
            .listing()
            .oldest("ao", RecordState::Queued)
            .await
            .unwrap(),
        None
    );
    accept(&store, "ao", "first", &kept).await;
    let accepted = store
        .records()
        .get(&store.key("ao", "first"))
        .await
        .unwrap()
        .unwrap()
        .first_seen_ms;
    assert_eq!(
        store
            .listing()
            .oldest("ao", RecordState::Queued)
            .await
            .unwrap(),
        Some(accepted),
        "queued, never tried"
    );
    time.pass(Duration::from_millis(300)).await;
    accept(&store, "ao", "second", &kept).await;
    let due = store.queue().lease_due("ao", 10, LONG).await.unwrap();
    assert_eq!(due.len(), 2);
    assert_eq!(
        store
            .listing()
            .oldest("ao", RecordState::Queued)
            .await
            .unwrap(),
        None,
        "both on their first attempt"
    );
    time.pass(Duration::from_millis(300)).await;
    let first = due.iter().find(|due| due.id == "first").unwrap();
    let key = store.key("ao", "first");
    store
        .records()
        .fail(&key, &first.lease, &retry(&kept, Duration::from_millis(10)))
        .await
        .unwrap();
    let record = store.records().get(&key).await.unwrap().unwrap();
    assert!(record.updated_ms > accepted, "the failure changed it");
    assert_eq!(
        store
            .listing()
            .oldest("ao", RecordState::Queued)
            .await
            .unwrap(),
        Some(accepted),
        "a failed attempt does not restart the clock"
    );
    time.pass(Duration::from_millis(50)).await;
    let again = store.queue().lease_due("ao", 10, LONG).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        store
            .listing()
            .oldest("ao", RecordState::Queued)
            .await
            .unwrap(),
        Some(accepted),
        "nor does its retry"
    );
    assert!(store
        .records()
        .complete(&key, &again[0].lease, &response("ok"), LONG)
        .await
        .unwrap());
    assert_eq!(
        store
            .listing()
            .oldest("ao", RecordState::Queued)
            .await
            .unwrap(),
        None,
        "delivered, it no longer counts"
    );
}

async fn a_crashed_workers_lease_lapses_and_another_worker_takes_the_event(
    store: Store,
    time: Time,
) {
    let kept = stored_request();
    let ttl = Duration::from_millis(300);
    accept(&store, "al", "e1", &kept).await;
    let key = store.key("al", "e1");
    let first = store
        .queue()
        .lease_due("al", 1, ttl)
        .await
        .unwrap()
        .remove(0);
    // Renewal keeps it from the others.
    time.pass(Duration::from_millis(200)).await;
    assert!(store
        .records()
        .renew(&key, &first.lease, ttl)
        .await
        .unwrap());
    time.pass(Duration::from_millis(200)).await;
    assert!(store
        .queue()
        .lease_due("al", 1, ttl)
        .await
        .unwrap()
        .is_empty());
    // Its worker dies: the lease lapses, and the event is due again.
    time.pass(Duration::from_millis(300)).await;
    let second = store
        .queue()
        .lease_due("al", 1, ttl)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(second.lease.attempt, 2);
    assert_ne!(second.lease.token, first.lease.token);
    assert!(
        !store
            .records()
            .complete(&key, &first.lease, &response("stale"), LONG)
            .await
            .unwrap(),
        "the dead worker's token is fenced out"
    );
    // A release (shutdown) puts it back at once.
    assert!(store.records().release(&key, &second.lease).await.unwrap());
    assert_eq!(
        store.records().get(&key).await.unwrap().unwrap().state,
        RecordState::Queued
    );
    assert_eq!(
        store.queue().lease_due("al", 1, ttl).await.unwrap().len(),
        1
    );
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
                    let due = store.queue().lease_due("aw", 4, LONG).await.unwrap();
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
    let lease = match store.records().claim(claim).await.unwrap() {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert_eq!(lease.attempt, 1);
    assert!(
        store
            .queue()
            .lease_due("ah", 5, LONG)
            .await
            .unwrap()
            .is_empty(),
        "held"
    );
    time.pass(Duration::from_millis(500)).await;
    let due = store.queue().lease_due("ah", 5, LONG).await.unwrap();
    assert_eq!(due.len(), 1, "its holder is gone: a worker takes it");
    assert_eq!(due[0].lease.attempt, 2);
    assert_eq!(due[0].record.request.as_ref(), Some(&kept));
}

/// What a scope holds queued, for the queue bounds: its waiting events,
/// and at least the bytes of their stored requests (each backend adds
/// its own keeping); a leased event no longer counts.
async fn what_a_scope_holds_queued_is_measured_in_events_and_bytes(store: Store, _: Time) {
    assert_eq!(
        store.queue().queued("qb").await.unwrap(),
        Default::default(),
        "empty"
    );
    let mut kept = stored_request();
    kept.body = bytes::Bytes::from(vec![b'x'; 2000]);
    for id in ["e1", "e2", "e3"] {
        assert!(matches!(
            accept(&store, "qb", id, &kept).await,
            ClaimOutcome::Queued
        ));
    }
    let queued = store.queue().queued("qb").await.unwrap();
    assert_eq!(queued.events, 3);
    assert!(
        (3 * 2000..3 * 20_000).contains(&queued.bytes),
        "each event's request and the store's keeping: {queued:?}"
    );
    assert_eq!(
        store.queue().queued("other").await.unwrap().events,
        0,
        "per scope"
    );
    let due = store.queue().lease_due("qb", 1, LONG).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(
        store.queue().queued("qb").await.unwrap().events,
        2,
        "the leased one is not waiting"
    );
}

conformance! {
    tests: [
        what_a_scope_holds_queued_is_measured_in_events_and_bytes,
        the_oldest_queued_event_is_measured_from_its_acceptance,
        accepted_events_queue_with_their_request_until_a_worker_leases_them,
        a_crashed_workers_lease_lapses_and_another_worker_takes_the_event,
        concurrent_workers_lease_each_due_event_once,
        an_accepted_and_claimed_event_falls_to_the_workers_when_its_lease_lapses,
    ],
}
