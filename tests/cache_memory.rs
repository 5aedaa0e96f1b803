//! The replay cache's budget bounds its real memory: every allocation on
//! the test's thread is counted, and what the cache holds after the
//! records it was handed are dropped is held against what it says it holds
//! (`store.replay_cache_bytes`). A binary of its own, so its counting
//! allocator sits under nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hookgate::store::{
    AttemptKind, FailureClass, PastAttempt, Record, RecordState, ReplayCache, StoreKey,
    StoredRequest,
};
use hookgate::store::{BodyKept, RecordedResponse};

/// Bytes allocated minus bytes freed, per thread (tests run in parallel).
struct Counting;

thread_local! {
    static NET: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = NET.try_with(|net| net.set(net.get() + delta));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn net() -> isize {
    NET.with(Cell::get)
}

const HOUR: Duration = Duration::from_secs(3600);

/// A completed record as a store reads it back: headers decoded from their
/// stored lines, the body its own buffer.
fn completed(headers: &str, body: &str) -> Record {
    let now = hookgate::clock::wall()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut record = Record::claimed("token", &"a".repeat(64), 1, now);
    record.state = RecordState::Completed;
    record.token = None;
    record.completed_at_ms = Some(now);
    record.route = Some("stripe".to_owned());
    record.response = Some(
        RecordedResponse::decode(
            200,
            headers.as_bytes(),
            Bytes::from(body.as_bytes().to_vec()),
            BodyKept::Whole,
        )
        .unwrap(),
    );
    record
}

/// Insert `n` records made by `make`, dropping each after its insert, and
/// answer (what the cache's allocations hold, what the cache counts).
fn fill(cache: &ReplayCache, n: usize, make: impl Fn(usize) -> (StoreKey, Record)) -> (f64, f64) {
    let before = net();
    for i in 0..n {
        let (key, record) = make(i);
        cache.insert(&key, &record, HOUR, cache.epoch());
    }
    ((net() - before) as f64, cache.bytes() as f64)
}

fn assert_within(held: f64, counted: f64, what: &str) {
    let ratio = held / counted;
    assert!(
        (0.75..=1.25).contains(&ratio),
        "{what}: the cache holds {held} bytes and counts {counted} (ratio {ratio:.2})"
    );
}

const SMALL: &str =
    "content-type: application/json\r\ncontent-length: 11\r\nx-request-id: 4f1c2a9e\r\n";

fn small(i: usize) -> (StoreKey, Record) {
    (
        StoreKey::event("hookgate:stripe", &format!("evt_{i:024}")),
        completed(SMALL, r#"{"ok":true}"#),
    )
}

#[test]
fn small_responses_are_counted_as_they_are_held() {
    // The report's case: `200 {"ok":true}` with a few headers, no eviction.
    let cache = ReplayCache::new(1 << 30, true);
    let (held, counted) = fill(&cache, 20_000, small);
    assert_within(held, counted, "20,000 small responses");
}

#[test]
fn a_full_cache_holds_its_budget() {
    let budget = 4 << 20;
    let cache = ReplayCache::new(budget, true);
    let (held, counted) = fill(&cache, 60_000, small);
    assert!(
        counted <= budget as f64,
        "counts {counted}, budget {budget}"
    );
    assert!(
        counted > budget as f64 * 0.9,
        "60,000 entries fill it: counts {counted}"
    );
    assert!(
        held <= budget as f64 * 1.25,
        "a {budget}-byte cache holds {held} bytes"
    );
    assert_within(held, counted, "a full 4 MiB cache");
}

#[test]
fn larger_responses_and_long_keys_are_counted_as_they_are_held() {
    let headers: String = (0..12)
        .map(|i| format!("x-upstream-header-{i}: value-{}\r\n", "v".repeat(i * 4)))
        .chain(["set-cookie: a=1\r\nset-cookie: b=2\r\n".to_owned()])
        .collect();
    let body = format!(r#"{{"order":"{}"}}"#, "o".repeat(1000));
    let cache = ReplayCache::new(1 << 30, true);
    let (held, counted) = fill(&cache, 5_000, |i| {
        let id = format!("{i}-{}", "k".repeat(180));
        (
            StoreKey::event("hookgate:shopify", &id),
            completed(&headers, &body),
        )
    });
    assert_within(held, counted, "5,000 1 KiB responses with 14 headers");
}

#[test]
fn an_entry_keeps_no_stored_request() {
    // A completed operator replay still carries the request it sent; the
    // answer to a duplicate never reads it, so the cache does not keep it.
    let cache = ReplayCache::new(1 << 30, true);
    let (held, counted) = fill(&cache, 1_000, |i| {
        let (key, mut record) = small(i);
        record.request = Some(StoredRequest {
            method: http::Method::POST,
            query: None,
            headers: http::HeaderMap::new(),
            body: Bytes::from(vec![b'x'; 32 * 1024]),
        });
        (key, record)
    });
    assert!(
        held < 1_000.0 * 4096.0,
        "1,000 entries hold {held} bytes: the 32 KiB requests were kept"
    );
    assert_within(held, counted, "entries of records with a stored request");
}

#[test]
fn an_entry_keeps_no_failure_history() {
    // An event that completed after failing keeps its failed attempts (up
    // to 10, each with 1 KiB of the upstream's answer); a duplicate's
    // answer never reads them, so the cache does not keep them.
    let cache = ReplayCache::new(1 << 30, true);
    let (held, counted) = fill(&cache, 1_000, |i| {
        let (key, mut record) = small(i);
        record.history = (0..10)
            .map(|n| {
                PastAttempt::new(
                    n,
                    AttemptKind::Worker,
                    FailureClass::Refused,
                    Some(503),
                    5,
                    None,
                    &[b'e'; 1024],
                )
            })
            .collect();
        (key, record)
    });
    assert!(
        held < 1_000.0 * 4096.0,
        "1,000 entries hold {held} bytes: the histories were kept"
    );
    assert_within(held, counted, "entries of records with a history");
}
