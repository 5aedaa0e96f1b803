//! The [`Listing`](hookgate::store::Listing) capability: pages of one
//! state, newest first, exact across records changed at once, and trimmed
//! of expired entries — on every backend.

use std::time::Duration;

use hookgate::store::{ClaimOutcome, Deleted, RecordState, Store};

#[allow(unused_imports)]
use super::*;

/// Create `id` in `scope` and leave it in `state` (queued: accepted).
pub(crate) async fn leave(store: &Store, scope: &str, id: &str, state: RecordState) {
    let key = store.key(scope, id);
    let kept = stored_request();
    if state == RecordState::Queued {
        assert!(matches!(
            accept(store, scope, id, &kept).await,
            ClaimOutcome::Queued
        ));
        return;
    }
    let lease = match store
        .records()
        .claim(request(&key, SHA_A, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    match state {
        // Renewed, as a holder does while its upstream works: Redis's
        // packed claim is listed once a script has read it (packed.rs).
        RecordState::Processing => {
            assert!(store.records().renew(&key, &lease, LONG).await.unwrap())
        }
        RecordState::Queued => {}
        RecordState::Stale => panic!("a stale record comes of an ordered lease (order.rs)"),
        RecordState::Completed => assert!(store
            .records()
            .complete(&key, &lease, &response("ok"), LONG)
            .await
            .unwrap()),
        RecordState::Failed | RecordState::Dead => assert_eq!(
            store
                .records()
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
            .listing()
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
    assert_eq!(store.listing().count("la", Dead).await.unwrap(), 2);
    assert_eq!(store.listing().count("la", Completed).await.unwrap(), 3);
    assert_eq!(store.listing().count("lb", Dead).await.unwrap(), 0);

    // A state change moves a record between listings; a delete drops it.
    assert_eq!(
        store
            .records()
            .delete(&store.key("la", "d1"), false)
            .await
            .unwrap(),
        Deleted::Deleted
    );
    assert_eq!(all_pages(&store, &["la"], Some(Dead), 10).await, ["la/d2"]);
    assert_eq!(store.listing().count("la", Dead).await.unwrap(), 1);
    let lease = match store
        .records()
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
        .records()
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

async fn a_trim_drops_the_listing_entries_of_expired_records(store: Store, time: Time) {
    let old = store.key("trim", "old");
    let lease = match store
        .records()
        .claim(request(&old, SHA_A, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::New(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(store
        .records()
        .complete(&old, &lease, &response("ok"), Duration::from_millis(200))
        .await
        .unwrap());
    time.pass(Duration::from_millis(400)).await;
    leave(&store, "trim", "new", RecordState::Completed).await;
    store
        .listing()
        .trim("trim", RecordState::Completed, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(
        store
            .listing()
            .count("trim", RecordState::Completed)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        all_pages(&store, &["trim"], Some(RecordState::Completed), 10).await,
        ["trim/new"]
    );
}

conformance! {
    tests: [
        listings_page_newest_first_by_state,
        listings_of_records_changed_at_once_page_exactly,
        a_trim_drops_the_listing_entries_of_expired_records,
    ],
}
