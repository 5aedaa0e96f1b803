//! The [`Transfer`](hookgate::store::Transfer) capability `hookgate store
//! copy` is made of: a record read whole with its expiry and written back
//! as it was — state, lease, times, response, request, history, listing
//! entry, queue place, replay guard — never over a newer one, on every
//! backend; and `hookgate store reencrypt`'s rewrite of a record's content,
//! never over a write it did not read.

use hookgate::store::{ClaimOutcome, ClaimRequest, Record, RecordState, Store};

use super::listing::leave;
#[allow(unused_imports)]
use super::*;

/// A scope of this run only (the shared cluster outlives a test).
fn scope() -> String {
    format!("t{}", rand::random::<u32>())
}

async fn exported(store: &Store, scope: &str, id: &str) -> (Record, u64) {
    store
        .export(&store.key(scope, id))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{id} is live"))
}

async fn listed(store: &Store, scope: &str, state: RecordState) -> Vec<String> {
    let page = store
        .listing()
        .list(&[scope], Some(state), 100, None)
        .await
        .unwrap();
    page.records.into_iter().map(|listed| listed.id).collect()
}

/// Each state's record, exported and imported under another id, reads back
/// equal, expires when the original does, is listed in its state and —
/// queued — is leased by a worker.
async fn an_imported_record_is_the_exported_one(store: Store, _: Time) {
    let scope = scope();
    // A stale record comes of an ordered lease, which not every store keeps.
    for state in RecordState::ALL
        .into_iter()
        .filter(|s| *s != RecordState::Stale)
    {
        let (from, to) = (
            format!("a-{}", state.as_str()),
            format!("b-{}", state.as_str()),
        );
        leave(&store, &scope, &from, state).await;
        let (record, expires_at_ms) = exported(&store, &scope, &from).await;
        assert_eq!(record.state, state);
        // At most the longest retention the records were given, from now.
        let (now, longest) = (hookgate::clock::unix_ms(), 600_000 + 1000);
        assert!(
            expires_at_ms > now && expires_at_ms <= now + longest,
            "{state:?}: expires at {expires_at_ms}, now {now}"
        );
        let key = store.key(&scope, &to);
        assert!(store
            .import(&key, &record, expires_at_ms, None)
            .await
            .unwrap());
        let (copy, copy_expires) = exported(&store, &scope, &to).await;
        assert_eq!(copy, record, "{state:?}");
        assert!(copy_expires.abs_diff(expires_at_ms) <= 1, "{state:?}");
        let ids = listed(&store, &scope, state).await;
        assert!(ids.contains(&to), "{state:?}: {ids:?}");
    }
    let (dead, _) = exported(&store, &scope, "b-dead").await;
    assert_eq!(dead.request, Some(stored_request()));
    assert_eq!(dead.history.len(), 1);
    assert!(dead.last_error.is_some());
    let (completed, _) = exported(&store, &scope, "b-completed").await;
    assert_eq!(completed.response, Some(response("ok")));
    // Both queued events, the original and its copy, are due.
    let due = store.queue().lease_due(&scope, 10, LONG).await.unwrap();
    let mut ids: Vec<String> = due.into_iter().map(|due| due.id).collect();
    ids.sort();
    assert_eq!(ids, ["a-queued", "b-queued"]);
}

/// An import keeps a record changed at or after its own: a second copy of
/// the same record, an older one; a newer one replaces it and moves its
/// listing entry.
async fn an_import_never_overwrites_a_newer_record(store: Store, _: Time) {
    let scope = scope();
    leave(&store, &scope, "dead", RecordState::Dead).await;
    let (dead, expires) = exported(&store, &scope, "dead").await;
    let key = store.key(&scope, "copy");
    assert!(store.import(&key, &dead, expires, None).await.unwrap());
    assert!(
        !store.import(&key, &dead, expires, None).await.unwrap(),
        "the same record again is kept"
    );
    let older = Record {
        state: RecordState::Completed,
        response: Some(response("older")),
        updated_ms: dead.updated_ms - 1,
        ..dead.clone()
    };
    assert!(!store.import(&key, &older, expires, None).await.unwrap());
    assert_eq!(exported(&store, &scope, "copy").await.0, dead);
    let newer = Record {
        state: RecordState::Completed,
        token: None,
        lease_expires_at_ms: None,
        completed_at_ms: Some(dead.updated_ms + 5),
        response: Some(response("newer")),
        updated_ms: dead.updated_ms + 5,
        ..dead.clone()
    };
    assert!(store.import(&key, &newer, expires, None).await.unwrap());
    assert_eq!(exported(&store, &scope, "copy").await.0, newer);
    assert!(!listed(&store, &scope, RecordState::Dead)
        .await
        .contains(&"copy".to_owned()));
    assert!(listed(&store, &scope, RecordState::Completed)
        .await
        .contains(&"copy".to_owned()));
    // And a delivery of it is answered by the recording.
    match store
        .records()
        .claim(request(&key, SHA_A, LONG))
        .await
        .unwrap()
    {
        ClaimOutcome::Completed(record) => assert_eq!(record.response.unwrap().body, "newer"),
        other => panic!("{other:?}"),
    }
}

/// A record whose retention ran out on the way is not written.
async fn an_expired_record_is_not_imported(store: Store, _: Time) {
    let scope = scope();
    leave(&store, &scope, "done", RecordState::Completed).await;
    let (record, _) = exported(&store, &scope, "done").await;
    let key = store.key(&scope, "late");
    let past = hookgate::clock::unix_ms() - 1000;
    assert!(!store.import(&key, &record, past, None).await.unwrap());
    assert_eq!(store.export(&key).await.unwrap(), None);
}

/// With its guard, a copied completion answers a delivery of the same body
/// under a new id, as the original's guard would.
async fn an_imported_guard_answers_the_same_body(store: Store, _: Time) {
    let scope = scope();
    leave(&store, &scope, "first", RecordState::Completed).await;
    let (record, expires) = exported(&store, &scope, "first").await;
    let key = store.key(&scope, "copied");
    let guard = store.guard_key(&scope, &record.body_sha256);
    assert!(store
        .import(&key, &record, expires, Some(&guard))
        .await
        .unwrap());
    store
        .records()
        .delete(&store.key(&scope, "first"), true)
        .await
        .unwrap();
    let other = store.key(&scope, "new-id");
    let claim = ClaimRequest {
        guard_key: Some(&guard),
        ..request(&other, &record.body_sha256, LONG)
    };
    match store.records().claim(claim).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(record.response.unwrap().body, "ok"),
        other => panic!("the guard points at the copy: {other:?}"),
    }
}

/// `record` with other content: another request (without a query),
/// answer and attempt excerpt, as a rewrite under another key leaves it.
fn rewritten(record: &Record, tag: &str) -> Record {
    let mut now = record.clone();
    if let Some(request) = now.request.as_mut() {
        request.query = None;
        request.headers = HeaderMap::new();
        request
            .headers
            .insert("hookgate-sealed", tag.parse().unwrap());
        request.body = Bytes::from(format!("request {tag}"));
    }
    if let Some(answer) = now.response.as_mut() {
        answer.headers = HeaderMap::new();
        answer.body = Bytes::from(format!("answer {tag}"));
    }
    for attempt in &mut now.history {
        attempt.body = Some(format!("excerpt {tag}"));
    }
    now
}

/// A reseal writes a record's content in place — nothing else of it — only
/// while the store keeps the content it was given as read: a record a
/// delivery wrote in between (here, a second rewrite) is left alone.
async fn a_reseal_writes_only_over_the_content_it_read(store: Store, _: Time) {
    let scope = scope();
    for state in [
        RecordState::Dead,
        RecordState::Completed,
        RecordState::Queued,
    ] {
        let id = state.as_str();
        leave(&store, &scope, id, state).await;
        let key = store.key(&scope, id);
        let (was, _) = exported(&store, &scope, id).await;
        let now = rewritten(&was, "one");
        assert!(store.reseal(&key, &was, &now).await.unwrap(), "{state:?}");
        assert_eq!(exported(&store, &scope, id).await.0, now, "{state:?}");
        let stale = rewritten(&was, "two");
        assert!(
            !store.reseal(&key, &was, &stale).await.unwrap(),
            "{state:?}: written since it was read"
        );
        assert_eq!(exported(&store, &scope, id).await.0, now, "{state:?}");
    }
    let gone = store.key(&scope, "gone");
    let (was, _) = exported(&store, &scope, "dead").await;
    assert!(!store.reseal(&gone, &was, &was).await.unwrap());
    assert_eq!(store.export(&gone).await.unwrap(), None);
}

conformance! {
    tests: [
        an_imported_record_is_the_exported_one,
        an_import_never_overwrites_a_newer_record,
        an_expired_record_is_not_imported,
        an_imported_guard_answers_the_same_body,
        a_reseal_writes_only_over_the_content_it_read,
    ],
}
