//! The replay cache: completed records kept in process, so a duplicate
//! delivery is answered without a store round trip.
//!
//! Why this is safe for exactly-once: a *completed* record does not change
//! until it expires, or an operator forgets it (`DELETE`) or redelivers it
//! with `force`. Expiry is covered by never keeping an entry past the
//! record's own retention; the two operator actions empty the cache on
//! this instance at once and, through the store, on every other instance
//! (a message on `{key_prefix}replay-cache`: Redis pub/sub, PostgreSQL
//! `LISTEN`/`NOTIFY`). A cache only
//! ever answers "already done" for something that was done, so a stale entry
//! can delay a forgotten event's reprocessing (until the invalidation
//! arrives, normally well under a millisecond) but never forward anything
//! twice.
//!
//! Two rules keep it from being stale for longer:
//! - It serves and keeps nothing unless it is *live*: on a fleet store,
//!   only while the invalidation feed is connected. When the feed drops, the
//!   cache is emptied and stays off until it is subscribed again, so an
//!   invalidation missed meanwhile cannot leave a stale entry behind.
//! - An entry is kept only if no invalidation arrived between the moment
//!   its claim was sent and the moment it is inserted (an epoch count): a
//!   record read just before an operator's `DELETE` is not cached after it.
//!
//! It holds at most `budget` bytes, evicting the oldest entries first, and
//! no entry longer than [`MAX_ENTRY_AGE`], a bound for anything unforeseen.
//! The bytes are what an entry really holds on the heap — the record, its
//! strings, the recorded headers' tables and values, the body, the key and
//! the entry's slots in the map and the eviction queue — so the budget
//! bounds the cache's memory (a counting allocator checks the estimate in
//! `tests/cache_memory.rs`); an entry keeps only what a duplicate's answer
//! reads, never a stored request or a failure history.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use futures_util::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::record::{Record, RecordState, StoreKey};

/// How another instance's change to a record reaches this instance's cache.
pub enum Invalidations {
    /// No other process writes this store (memory, embedded): dropping the
    /// entry here is enough.
    Local,
    /// Instances tell each other through the store (Redis pub/sub,
    /// PostgreSQL `LISTEN`/`NOTIFY`): this starts following the channel,
    /// keeping the cache live only while subscribed.
    Feed(Box<dyn FnOnce(String, Arc<ReplayCache>) + Send>),
    /// No way to hear the other instances: the cache stays off.
    Unsupported,
}

/// Keep `cache` fed for as long as it exists: `subscribe` returns a stream
/// of invalidations (or fails); while it runs the cache is live, and any
/// message empties it — forgets and forced redeliveries are rare, and a
/// replay guard's answer is cached under another key than its own. When
/// the stream ends the cache is emptied and off until `subscribe` succeeds
/// again (after 100 ms, doubling to 5 s while it keeps failing).
pub fn follow<S, F>(cache: &Arc<ReplayCache>, mut subscribe: impl FnMut() -> F + Send + 'static)
where
    F: std::future::Future<Output = Option<S>> + Send,
    S: futures_util::Stream + Send,
{
    let cache = Arc::downgrade(cache);
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        while cache.strong_count() > 0 {
            if let Some(messages) = subscribe().await {
                set_live(&cache, true);
                backoff = Duration::from_millis(100);
                let mut messages = std::pin::pin!(messages);
                while messages.next().await.is_some() {
                    let Some(cache) = cache.upgrade() else {
                        return;
                    };
                    cache.clear();
                }
                tracing::warn!("replay cache: lost the invalidation feed; serving from the store until it is back");
            }
            set_live(&cache, false);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    });
}

fn set_live(cache: &Weak<ReplayCache>, live: bool) {
    if let Some(cache) = cache.upgrade() {
        cache.set_live(live);
    }
}

/// The longest an entry is served, whatever its record's retention.
pub const MAX_ENTRY_AGE: Duration = Duration::from_secs(600);

pub struct ReplayCache {
    budget: usize,
    live: AtomicBool,
    /// Invalidations seen so far (see the module docs).
    epoch: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Arc<str>, Entry>,
    /// Insertion order, for eviction: (key, the entry's serial).
    order: VecDeque<(Arc<str>, u64)>,
    bytes: usize,
    serial: u64,
}

struct Entry {
    record: Arc<Record>,
    expires: Instant,
    bytes: usize,
    serial: u64,
}

impl ReplayCache {
    /// A cache of at most `budget` bytes; `live` from the start for a store
    /// no other process writes (memory, embedded), else once its
    /// invalidation feed is connected.
    pub fn new(budget: usize, live: bool) -> Self {
        Self {
            budget,
            live: AtomicBool::new(live),
            epoch: AtomicU64::new(0),
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// The feed connected (`true`) or dropped (`false`): either way what is
    /// held now may have missed an invalidation, so it goes.
    pub fn set_live(&self, live: bool) {
        self.clear();
        self.live.store(live, Ordering::Release);
    }

    /// Taken before a claim is sent: [`ReplayCache::insert`] refuses the
    /// answer if an invalidation arrived meanwhile.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The completed record of `key`, if held and not expired.
    pub fn get(&self, key: &StoreKey) -> Option<Arc<Record>> {
        if !self.is_live() {
            return None;
        }
        let mut inner = self.inner.lock().expect("replay cache lock");
        let entry = inner.entries.get(key.as_str())?;
        if entry.expires > Instant::now() {
            return Some(Arc::clone(&entry.record));
        }
        let gone = inner.entries.remove(key.as_str()).expect("just found");
        inner.bytes -= gone.bytes;
        None
    }

    /// Keep `record` — a completed one, read by a claim sent at `epoch` —
    /// until its retention ends (counted from its completion), at most
    /// [`MAX_ENTRY_AGE`].
    pub fn insert(&self, key: &StoreKey, record: &Record, retention: Duration, epoch: u64) {
        if !self.is_live() || record.state != RecordState::Completed {
            return;
        }
        let Some(remaining) = remaining(record, retention) else {
            return;
        };
        // What a duplicate's answer reads: not the stored request, nor the
        // failed attempts of an event that completed after failing.
        let kept = Record {
            request: None,
            history: Vec::new(),
            ..record.clone()
        };
        let bytes = entry_bytes(key.as_str(), &kept);
        if bytes > self.budget / 8 {
            return; // one huge response must not flush the cache
        }
        let mut inner = self.inner.lock().expect("replay cache lock");
        // Under the lock, so an invalidation cannot slip in between.
        if self.epoch() != epoch {
            return;
        }
        inner.serial += 1;
        let serial = inner.serial;
        let key: Arc<str> = Arc::from(key.as_str());
        let entry = Entry {
            record: Arc::new(kept),
            expires: Instant::now() + remaining.min(MAX_ENTRY_AGE),
            bytes,
            serial,
        };
        if let Some(old) = inner.entries.insert(Arc::clone(&key), entry) {
            inner.bytes -= old.bytes;
        }
        inner.bytes += bytes;
        inner.order.push_back((key, serial));
        while inner.bytes > self.budget {
            let Some((oldest, serial)) = inner.order.pop_front() else {
                break;
            };
            if inner
                .entries
                .get(&oldest)
                .is_some_and(|e| e.serial == serial)
            {
                let gone = inner.entries.remove(&oldest).expect("just found");
                inner.bytes -= gone.bytes;
            }
        }
        // Entries replaced or removed leave their queue slots behind; drop
        // them when they outnumber the live ones.
        if inner.order.len() > 2 * inner.entries.len() + 64 {
            let Inner { entries, order, .. } = &mut *inner;
            order.retain(|(key, serial)| entries.get(key).is_some_and(|e| e.serial == *serial));
        }
    }

    /// Drop everything: a key changed (forgotten, redelivered) — and not
    /// just its entry, since a replay guard's answer, another key's record,
    /// may be held under a key of its own (operators do this rarely; the
    /// cache refills from the next duplicates) — or the feed came or went.
    pub fn clear(&self) {
        let mut inner = self.inner.lock().expect("replay cache lock");
        self.epoch.fetch_add(1, Ordering::AcqRel);
        *inner = Inner::default();
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().expect("replay cache lock").bytes
    }
}

/// How long `record` has left before its retention ends.
fn remaining(record: &Record, retention: Duration) -> Option<Duration> {
    let completed = record.completed_at_ms?;
    let ends = SystemTime::UNIX_EPOCH + Duration::from_millis(completed) + retention;
    ends.duration_since(crate::clock::wall()).ok()
}

/// The heap an entry of `record` under `key` holds. Allocator size classes
/// aside, this is what the process pays; the parts hookgate cannot see
/// (the tables' growth) are counted at their average.
fn entry_bytes(key: &str, record: &Record) -> usize {
    // The key, one `Arc<str>` shared by the map and the queue.
    let key = ARC + key.len();
    // The map keeps between 8/7 and 16/7 slots per entry (a slot and its
    // control byte); the queue doubles, and keeps up to twice the live
    // entries in stale slots before it is swept.
    let slots = (size_of::<(Arc<str>, Entry)>() + 1) * 8 / 5 + size_of::<(Arc<str>, u64)>() * 2;
    let strings = [&record.token, &record.route, &record.replay_of]
        .into_iter()
        .flatten()
        .map(String::len)
        .sum::<usize>()
        + record.body_sha256.len();
    let response = record.response.as_ref().map_or(0, |response| {
        headers_bytes(&response.headers) + shared_bytes(&response.body)
    });
    ARC + size_of::<Record>() + key + slots + strings + response
}

/// A reference count's header (`Arc`), and the `Shared` block a `Bytes`
/// buffer gains when it is cloned.
const ARC: usize = 2 * size_of::<usize>();
const SHARED: usize = 3 * size_of::<usize>();

fn shared_bytes(bytes: &[u8]) -> usize {
    if bytes.is_empty() {
        0
    } else {
        bytes.len() + SHARED
    }
}

/// A `HeaderMap`'s heap: its index (4 bytes a slot, a third more slots than
/// it holds), one bucket per name (hash, name, value, links), one slot per
/// further value of a name, and every name's and value's own bytes.
fn headers_bytes(headers: &HeaderMap) -> usize {
    let pair = size_of::<HeaderName>() + size_of::<HeaderValue>();
    let index = headers.capacity() * 4 / 3 * 4;
    let buckets = headers.keys_len() * (pair + 4 * size_of::<usize>());
    let extra =
        (headers.len() - headers.keys_len()) * (size_of::<HeaderValue>() + 4 * size_of::<usize>());
    let names = headers
        .keys()
        .map(|name| shared_bytes(name.as_str().as_bytes()))
        .sum::<usize>();
    let values = headers
        .values()
        .map(|value| shared_bytes(value.as_bytes()))
        .sum::<usize>();
    index + buckets + extra + names + values
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};

    use super::*;
    use crate::replay::{BodyKept, RecordedResponse};

    fn completed(body: &str) -> Record {
        let now = crate::clock::wall()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let mut record = Record::claimed("t", "sha", 1, now);
        record.state = RecordState::Completed;
        record.token = None;
        record.completed_at_ms = Some(now);
        record.response = Some(RecordedResponse {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from(body.to_owned()),
            body_kept: BodyKept::Whole,
        });
        record
    }

    fn key(id: &str) -> StoreKey {
        StoreKey::event("hookgate:r", id)
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn serves_what_it_holds_until_invalidated() {
        let cache = ReplayCache::new(1 << 20, true);
        cache.insert(&key("a"), &completed("ok"), HOUR, cache.epoch());
        assert_eq!(
            cache
                .get(&key("a"))
                .unwrap()
                .response
                .as_ref()
                .unwrap()
                .body,
            "ok"
        );
        cache.clear();
        assert!(cache.get(&key("a")).is_none());
    }

    #[test]
    fn an_invalidation_during_the_claim_keeps_the_answer_out() {
        let cache = ReplayCache::new(1 << 20, true);
        let epoch = cache.epoch();
        cache.clear(); // the operator's DELETE, meanwhile
        cache.insert(&key("a"), &completed("ok"), HOUR, epoch);
        assert!(cache.get(&key("a")).is_none());
    }

    #[test]
    fn nothing_is_kept_or_served_while_not_live() {
        let cache = ReplayCache::new(1 << 20, true);
        cache.insert(&key("a"), &completed("ok"), HOUR, cache.epoch());
        cache.set_live(false);
        assert!(cache.get(&key("a")).is_none());
        cache.insert(&key("b"), &completed("ok"), HOUR, cache.epoch());
        cache.set_live(true);
        assert!(
            cache.get(&key("b")).is_none(),
            "emptied when the feed returns"
        );
    }

    #[test]
    fn only_completed_records_within_retention_are_kept() {
        let cache = ReplayCache::new(1 << 20, true);
        let mut dead = completed("x");
        dead.state = RecordState::Dead;
        cache.insert(&key("dead"), &dead, HOUR, cache.epoch());
        assert!(cache.get(&key("dead")).is_none());
        let mut old = completed("x");
        old.completed_at_ms = Some(1_000);
        cache.insert(&key("old"), &old, HOUR, cache.epoch());
        assert!(cache.get(&key("old")).is_none(), "its retention is over");
    }

    #[test]
    fn stays_within_its_budget_evicting_the_oldest() {
        let cache = ReplayCache::new(64 * 1024, true);
        let body = "x".repeat(1000);
        for i in 0..200 {
            cache.insert(&key(&i.to_string()), &completed(&body), HOUR, cache.epoch());
            assert!(cache.bytes() <= 64 * 1024);
        }
        assert!(cache.get(&key("0")).is_none(), "the oldest went first");
        assert!(cache.get(&key("199")).is_some(), "the newest stayed");
        let huge = "x".repeat(16 * 1024);
        cache.insert(&key("huge"), &completed(&huge), HOUR, cache.epoch());
        assert!(
            cache.get(&key("huge")).is_none(),
            "over an eighth of the budget"
        );
    }
}
