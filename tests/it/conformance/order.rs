//! Ordered leases (`Queue::lease_ordered`, docs/guide/ordering.md, "Ordered delivery"): of
//! each entity only its first pending event, one at a time, in `stale_by`
//! then acceptance order; a stale head turns `stale`; a dead head holds
//! its entity unless its rules skip it; `reorder_window` holds each event.
//! On every backend that keeps an order.

use std::time::Duration;

use hookgate::store::Rules;
use hookgate::store::{
    ClaimMode, ClaimOutcome, ClaimRequest, Deleted, OrderSpot, RecordState, Store, Stored,
};

#[allow(unused_imports)]
use super::*;

const WAIT: Rules = Rules { skip_dead: false };
const SKIP: Rules = Rules { skip_dead: true };

/// Accept `id` of `entity` (with its `stale_by` value), held `hold`.
async fn accept_in(
    store: &Store,
    scope: &str,
    id: &str,
    (entity, value): (&str, Option<f64>),
    hold: Duration,
) {
    let key = store.key(scope, id);
    let kept = stored_request();
    let claim = ClaimRequest {
        mode: ClaimMode::Accept,
        stored: Some(Stored {
            request: &kept,
            route: "orders",
            replay_of: None,
        }),
        order: Some(OrderSpot {
            entity,
            value,
            hold,
        }),
        ..request(&key, SHA_A, LONG)
    };
    let accepted = store.records().claim(claim).await.unwrap();
    assert!(
        matches!(accepted, ClaimOutcome::Queued),
        "{id}: {accepted:?}"
    );
}

/// The ids leased now, sorted, and the stale ones met.
async fn lease(store: &Store, scope: &str, rules: Rules) -> (Vec<String>, Vec<String>) {
    let leased = store
        .queue()
        .lease_ordered(scope, 10, LONG, rules)
        .await
        .unwrap();
    let mut ids: Vec<String> = leased.due.into_iter().map(|due| due.id).collect();
    ids.sort();
    (ids, leased.stale)
}

/// The lease the record of `id` is held under now.
async fn held(store: &Store, scope: &str, id: &str) -> Lease {
    let record = store
        .records()
        .get(&store.key(scope, id))
        .await
        .unwrap()
        .unwrap();
    Lease {
        token: record.token.expect("held"),
        attempt: record.attempts,
    }
}

/// Complete the event `id` under the lease it is held by.
async fn complete(store: &Store, scope: &str, id: &str) {
    let (key, lease) = (store.key(scope, id), held(store, scope, id).await);
    assert!(store
        .records()
        .complete(&key, &lease, &response("ok"), LONG)
        .await
        .unwrap());
}

async fn fail(store: &Store, scope: &str, id: &str, failure: &Failure<'_>) -> RecordState {
    let (key, lease) = (store.key(scope, id), held(store, scope, id).await);
    store
        .records()
        .fail(&key, &lease, failure)
        .await
        .unwrap()
        .unwrap()
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|id| id.to_string()).collect()
}

async fn an_entity_is_leased_one_event_at_a_time_in_acceptance_order(store: Store, time: Time) {
    let s = "o1";
    for id in ["a1", "a2", "a3"] {
        accept_in(&store, s, id, ("sub_a", None), Duration::ZERO).await;
    }
    accept_in(&store, s, "b1", ("sub_b", None), Duration::ZERO).await;
    accept(&store, s, "u1", &stored_request()).await;
    accept(&store, s, "u2", &stored_request()).await;

    let first = lease(&store, s, WAIT).await.0;
    assert_eq!(
        first,
        ids(&["a1", "b1", "u1", "u2"]),
        "each entity's first, and every unordered one"
    );
    assert_eq!(
        lease(&store, s, WAIT).await.0,
        ids(&[]),
        "a2 waits while a1 is in flight"
    );

    complete(&store, s, "a1").await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["a2"]));
    // A refused attempt keeps the entity: a3 never overtakes a2.
    let kept = stored_request();
    let later = retry(&kept, Duration::from_millis(300));
    assert_eq!(fail(&store, s, "a2", &later).await, RecordState::Queued);
    assert_eq!(
        lease(&store, s, WAIT).await.0,
        ids(&[]),
        "a3 waits for a2's retry"
    );
    time.pass(Duration::from_millis(400)).await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["a2"]));
    complete(&store, s, "a2").await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["a3"]));
}

async fn order_is_by_stale_value_then_acceptance(store: Store, _time: Time) {
    let s = "o2";
    accept_in(&store, s, "v30", ("e", Some(30.0)), Duration::ZERO).await;
    accept_in(&store, s, "v10a", ("e", Some(10.0)), Duration::ZERO).await;
    accept_in(&store, s, "none", ("e", None), Duration::ZERO).await;
    accept_in(&store, s, "v10b", ("e", Some(10.0)), Duration::ZERO).await;
    accept_in(&store, s, "neg", ("e", Some(-1.5)), Duration::ZERO).await;
    let mut order = Vec::new();
    for _ in 0..5 {
        let (leased, stale) = lease(&store, s, WAIT).await;
        assert_eq!(leased.len(), 1, "one at a time: {leased:?}");
        assert!(stale.is_empty(), "{stale:?}");
        complete(&store, s, &leased[0]).await;
        order.push(leased[0].clone());
    }
    assert_eq!(order, ids(&["none", "neg", "v10a", "v10b", "v30"]));
}

async fn an_event_older_than_the_newest_delivered_turns_stale(store: Store, _time: Time) {
    let s = "o3";
    accept_in(&store, s, "new", ("e", Some(20.0)), Duration::ZERO).await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["new"]));
    // Older, but late: it waits for the one in flight, then is stale.
    accept_in(&store, s, "old", ("e", Some(10.0)), Duration::ZERO).await;
    accept_in(&store, s, "same", ("e", Some(20.0)), Duration::ZERO).await;
    accept_in(&store, s, "bare", ("e", None), Duration::ZERO).await;
    assert_eq!(lease(&store, s, WAIT).await, (ids(&[]), ids(&[])));
    complete(&store, s, "new").await;

    // `bare` has no value: it goes first and is never stale.
    assert_eq!(lease(&store, s, WAIT).await, (ids(&["bare"]), ids(&[])));
    complete(&store, s, "bare").await;
    let (leased, stale) = lease(&store, s, WAIT).await;
    assert_eq!(stale, ids(&["old"]));
    assert_eq!(leased, ids(&["same"]), "an equal value is not stale");
    let record = store
        .records()
        .get(&store.key(s, "old"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, RecordState::Stale);
    assert_eq!(record.attempts, 0, "never forwarded");
    assert!(record.request.is_some(), "kept like a dead letter");

    // A duplicate of it is answered, and an operator may send it on purpose.
    let key = store.key(s, "old");
    let duplicate = store
        .records()
        .claim(request(&key, SHA_A, LONG))
        .await
        .unwrap();
    assert!(matches!(duplicate, ClaimOutcome::Dead(_)), "{duplicate:?}");
    accept_in(&store, s, "next", ("e", Some(30.0)), Duration::ZERO).await;
    let again = store.records().claim(redeliver(&key, false)).await.unwrap();
    assert!(matches!(again, ClaimOutcome::New(_)), "{again:?}");
    assert_eq!(
        lease(&store, s, WAIT).await.0,
        ids(&[]),
        "its entity waits while it is sent"
    );
    complete(&store, s, "old").await;
    assert_eq!(
        lease(&store, s, WAIT).await.0,
        ids(&[]),
        "`same` is in flight"
    );
    complete(&store, s, "same").await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["next"]));
}

async fn a_dead_event_holds_its_entity_unless_skipped(store: Store, _time: Time) {
    let kept = stored_request();
    let dead = failure(&kept, true, false);
    for (s, rules) in [("o4w", WAIT), ("o4s", SKIP)] {
        accept_in(&store, s, "d1", ("e", None), Duration::ZERO).await;
        accept_in(&store, s, "d2", ("e", None), Duration::ZERO).await;
        accept_in(&store, s, "d3", ("e", None), Duration::ZERO).await;
        assert_eq!(lease(&store, s, rules).await.0, ids(&["d1"]));
        assert_eq!(fail(&store, s, "d1", &dead).await, RecordState::Dead);
        match rules.skip_dead {
            true => assert_eq!(lease(&store, s, rules).await.0, ids(&["d2"]), "{s}"),
            false => assert_eq!(lease(&store, s, rules).await.0, ids(&[]), "{s}: blocked"),
        }
    }

    // Redelivered by an operator, the dead event holds its entity while it
    // is in flight, and the rest follow it in order.
    let s = "o4w";
    let key = store.key(s, "d1");
    let redelivered = store.records().claim(redeliver(&key, false)).await.unwrap();
    assert!(
        matches!(redelivered, ClaimOutcome::New(_)),
        "{redelivered:?}"
    );
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&[]), "d1 is in flight");
    complete(&store, s, "d1").await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["d2"]));
    // Forgotten, a dead event holds nothing either.
    assert_eq!(fail(&store, s, "d2", &dead).await, RecordState::Dead);
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&[]));
    let forgotten = store
        .records()
        .delete(&store.key(s, "d2"), false)
        .await
        .unwrap();
    assert_eq!(forgotten, Deleted::Deleted);
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["d3"]));
}

/// `blocked` names each entity whose first pending event is dead, with how
/// many wait behind it, oldest death first; a redelivery that completes
/// the dead event, or forgetting it, unblocks the entity.
async fn blocked_entities_name_their_dead_head_and_the_events_behind_it(store: Store, time: Time) {
    let s = "o7";
    let kept = stored_request();
    let dead = failure(&kept, true, false);
    for id in ["a1", "a2", "a3"] {
        accept_in(&store, s, id, ("a", None), Duration::ZERO).await;
    }
    for id in ["b1", "b2"] {
        accept_in(&store, s, id, ("b", Some(1.0)), Duration::ZERO).await;
    }
    accept_in(&store, s, "c1", ("c", None), Duration::ZERO).await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["a1", "b1", "c1"]));
    assert_eq!(
        store.listing().blocked(s, 10).await.unwrap(),
        vec![],
        "nothing dead"
    );
    assert_eq!(fail(&store, s, "a1", &dead).await, RecordState::Dead);
    time.pass(Duration::from_millis(5)).await;
    assert_eq!(fail(&store, s, "b1", &dead).await, RecordState::Dead);
    complete(&store, s, "c1").await;

    let blocked = store.listing().blocked(s, 10).await.unwrap();
    let seen: Vec<(&str, &str, u64)> = (blocked.iter())
        .map(|held| (held.entity.as_str(), held.dead.as_str(), held.waiting))
        .collect();
    assert_eq!(seen, [("a", "a1", 2), ("b", "b1", 1)]);
    assert!(blocked[0].since_ms <= blocked[1].since_ms);
    assert_eq!(
        store.listing().blocked(s, 1).await.unwrap().len(),
        1,
        "at most limit"
    );

    let key = store.key(s, "a1");
    let redelivered = store.records().claim(redeliver(&key, false)).await.unwrap();
    assert!(matches!(redelivered, ClaimOutcome::New(_)));
    complete(&store, s, "a1").await;
    let forgotten = store
        .records()
        .delete(&store.key(s, "b1"), false)
        .await
        .unwrap();
    assert_eq!(forgotten, Deleted::Deleted);
    assert_eq!(
        store.listing().blocked(s, 10).await.unwrap(),
        vec![],
        "both unblocked"
    );
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["a2", "b2"]));
}

/// A copied event (`store copy`) keeps its place: an event of its entity
/// accepted after the copy goes after it, however far the copy's places
/// are ahead of this store's sequence.
async fn a_copied_event_goes_before_its_entitys_new_ones(store: Store, _time: Time) {
    let (from, to) = ("o8a", "o8b");
    accept_in(&store, from, "old", ("e", None), Duration::ZERO).await;
    let (mut record, expires) = store
        .export(&store.key(from, "old"))
        .await
        .unwrap()
        .unwrap();
    record.order.as_mut().unwrap().seq += 1_000_000;
    let copied = store
        .import(&store.key(to, "old"), &record, expires, None)
        .await;
    assert!(copied.unwrap());
    accept_in(&store, to, "new", ("e", None), Duration::ZERO).await;
    assert_eq!(lease(&store, to, WAIT).await.0, ids(&["old"]));
    complete(&store, to, "old").await;
    assert_eq!(lease(&store, to, WAIT).await.0, ids(&["new"]));
}

/// One hot entity's backlog, all due, never hides another entity's event
/// behind it: one lease takes both heads, and the backlog waits for its
/// wake showing when it was due.
async fn a_hot_entitys_backlog_never_hides_another_entity(store: Store, _time: Time) {
    let s = "o9";
    for i in 0..150 {
        accept_in(
            &store,
            s,
            &format!("hot{i:03}"),
            ("hot", None),
            Duration::ZERO,
        )
        .await;
    }
    accept_in(&store, s, "cold", ("cold", None), Duration::ZERO).await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["cold", "hot000"]));
    // A parked event shows when it was due, not when it is looked at again.
    let due_at = |id: &'static str| {
        let store = &store;
        async move {
            let record = store
                .records()
                .get(&store.key(s, id))
                .await
                .unwrap()
                .unwrap();
            record.next_attempt_ms.expect("queued")
        }
    };
    assert!(
        due_at("hot100").await < due_at("cold").await,
        "cold's lease ends sooner"
    );
    complete(&store, s, "hot000").await;
    assert_eq!(
        lease(&store, s, WAIT).await.0,
        ids(&["hot001"]),
        "the next, woken"
    );
}

async fn the_reorder_window_lets_an_older_late_event_go_first(store: Store, time: Time) {
    let s = "o5";
    let hold = Duration::from_millis(600);
    accept_in(&store, s, "second", ("e", Some(2.0)), hold).await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&[]), "held");
    time.pass(Duration::from_millis(300)).await;
    accept_in(&store, s, "first", ("e", Some(1.0)), hold).await;
    time.pass(Duration::from_millis(400)).await;
    assert_eq!(
        lease(&store, s, WAIT).await.0,
        ids(&[]),
        "`second` is due, but `first` goes before it and is still held"
    );
    time.pass(Duration::from_millis(300)).await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["first"]));
    complete(&store, s, "first").await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["second"]));
}

async fn a_lapsed_lease_gives_the_head_again_never_its_sibling(store: Store, time: Time) {
    let s = "o6";
    accept_in(&store, s, "h1", ("e", None), Duration::ZERO).await;
    accept_in(&store, s, "h2", ("e", None), Duration::ZERO).await;
    let short = Duration::from_millis(300);
    let first = store
        .queue()
        .lease_ordered(s, 10, short, WAIT)
        .await
        .unwrap();
    assert_eq!(first.due.len(), 1);
    assert_eq!(first.due[0].id, "h1");
    time.pass(Duration::from_millis(400)).await;
    let again = store
        .queue()
        .lease_ordered(s, 10, LONG, WAIT)
        .await
        .unwrap();
    assert_eq!(again.due.len(), 1, "{:?}", again.due);
    assert_eq!(again.due[0].id, "h1", "its worker died: h1 again, not h2");
    assert_eq!(again.due[0].lease.attempt, 2);
    // The dead worker's token settles nothing.
    let key = store.key(s, "h1");
    let lapsed = &first.due[0].lease;
    assert!(!store
        .records()
        .complete(&key, lapsed, &response("late"), LONG)
        .await
        .unwrap());
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&[]));
}

/// A head whose lease lapsed is due again after a sibling accepted while
/// it was in flight, so a pass meets the sibling first, leases the head for
/// it, and then meets the head itself: the pass must not park what it just
/// leased. Parked, a head whose worker then dies too is out of the due
/// index for a day, and its entity with it (found by a fleet SIGKILLed
/// under load).
async fn a_head_leased_again_is_never_parked_by_its_own_pass(store: Store, time: Time) {
    let s = "o6b";
    let short = Duration::from_millis(300);
    accept_in(&store, s, "h1", ("e", None), Duration::ZERO).await;
    let first = store
        .queue()
        .lease_ordered(s, 10, short, WAIT)
        .await
        .unwrap();
    assert_eq!(first.due.len(), 1);
    accept_in(&store, s, "h2", ("e", None), Duration::ZERO).await;
    time.pass(Duration::from_millis(400)).await;
    for attempt in 2..=3 {
        let leased = store
            .queue()
            .lease_ordered(s, 10, short, WAIT)
            .await
            .unwrap();
        let got: Vec<(&str, u32)> = (leased.due.iter())
            .map(|due| (due.id.as_str(), due.lease.attempt))
            .collect();
        assert_eq!(got, [("h1", attempt)], "its worker died again: h1 again");
        time.pass(Duration::from_millis(400)).await;
    }
    complete(&store, s, "h1").await;
    assert_eq!(lease(&store, s, WAIT).await.0, ids(&["h2"]));
}

conformance! {
    tests: [
        an_entity_is_leased_one_event_at_a_time_in_acceptance_order,
        order_is_by_stale_value_then_acceptance,
        an_event_older_than_the_newest_delivered_turns_stale,
        a_dead_event_holds_its_entity_unless_skipped,
        the_reorder_window_lets_an_older_late_event_go_first,
        a_lapsed_lease_gives_the_head_again_never_its_sibling,
        a_head_leased_again_is_never_parked_by_its_own_pass,
        blocked_entities_name_their_dead_head_and_the_events_behind_it,
        a_copied_event_goes_before_its_entitys_new_ones,
        a_hot_entitys_backlog_never_hides_another_entity,
    ],
}
