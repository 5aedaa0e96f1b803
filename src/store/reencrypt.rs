//! `hookgate store reencrypt`: every live record whose kept content is
//! sealed under an older key of `[store.encryption] keys`, or kept in
//! clear from before encryption was on, sealed again under the first key,
//! so the older keys can be dropped (docs/operations/deploying.md, "Rotating
//! [store.encryption] keys").
//!
//! The store is read the way `store copy` reads it — one scope and one
//! state at a time, by index, a page after another — and each record is
//! read whole, as stored. A record that needs it is opened, sealed under
//! the first key and written back with [`Transfer::reseal`]: only its
//! content, and only while the store still keeps the content that was read,
//! compared in the same atomic step. A gateway that writes the record in
//! between (a completion, a failed attempt) wins, and the record is read
//! again. So it is safe while the fleet serves, and running it again —
//! after an interruption — only rewrites what is still left: the run is
//! resumable by being idempotent.
//!
//! Rewrites are paced (`rate` a second) so a store under traffic keeps
//! its headroom; reading what is already current is not paced. At most
//! [`PARALLEL`] records are read and rewritten at once.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, TryStreamExt};
use tokio::sync::Mutex;
use tokio::time::{Interval, MissedTickBehavior};

use super::backend::Transfer;
use super::backends::on;
use super::sealed::reseal_record;
use super::{Cursor, Record, RecordState, Store, StoreError, StoreKey};

/// Records read from one page of a listing at a time.
const PAGE: usize = 500;

/// Records read and rewritten at once.
const PARALLEL: usize = 16;

/// Reads of a record that changed under each rewrite before it is left to
/// a later run.
const TRIES: u32 = 3;

/// A record's kept content as every backend lays it out: the request's
/// query, header lines and body, the answer's header lines and body, the
/// history's lines — `None` where the record has none. What
/// [`Transfer::reseal`] compares and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    pub request_query: Option<String>,
    pub request_headers: Option<Vec<u8>>,
    pub request_body: Option<Bytes>,
    pub response_headers: Option<Vec<u8>>,
    pub response_body: Option<Bytes>,
    pub history: Option<String>,
}

impl Content {
    pub fn of(record: &Record) -> Content {
        let request = record.request.as_ref();
        let response = record.response.as_ref();
        Content {
            request_query: request.and_then(|r| r.query.clone()),
            request_headers: request.map(|r| r.encode_headers()),
            request_body: request.map(|r| r.body.clone()),
            response_headers: response.map(|r| r.encode_headers()),
            response_body: response.map(|r| r.body.clone()),
            history: super::history::encode(&record.history),
        }
    }
}

/// What a re-encryption came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resealed {
    /// Read whole.
    pub read: u64,
    /// Sealed again under the first key.
    pub resealed: u64,
    /// Already all under the first key (or holding no content).
    pub current: u64,
    /// Expired (or forgotten) between the listing and the read.
    pub gone: u64,
    /// Written by a gateway under each of [`TRIES`] rewrites: left for the
    /// next run.
    pub busy: u64,
    /// Opened by no listed key (each logged with its route and key, and
    /// counted in `hookgate_store_decrypt_failures_total`).
    pub unreadable: u64,
}

impl Resealed {
    /// Whether this pass found nothing under an older key or in clear, and
    /// nothing it could not open: the older keys may be dropped.
    pub fn done(&self) -> bool {
        self.resealed == 0 && self.busy == 0 && self.unreadable == 0
    }
}

impl fmt::Display for Resealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Resealed {
            read,
            resealed,
            current,
            gone,
            busy,
            unreadable,
        } = self;
        write!(
            f,
            "read {read}  resealed {resealed}  current {current}  gone {gone}  \
             busy {busy}  unreadable {unreadable}"
        )
    }
}

enum Outcome {
    Resealed,
    Current,
    Gone,
    Busy,
    Unreadable,
}

/// Full passes at most: a pass ends the run when it rewrote nothing.
const PASSES: usize = 5;

/// Seal every live record of `scopes` under the first key that is not
/// sealed under it yet, at most `rate` rewrites a second; `progress` hears
/// each pass's counts after each page. A record that moves to another
/// state's listing while a pass reads (a completion) may be passed over,
/// so passes repeat until one finds nothing to rewrite (at most
/// [`PASSES`]): that last pass is the proof that nothing is left. Returns
/// each pass's counts.
pub async fn reencrypt(
    store: &Store,
    scopes: &[String],
    rate: f64,
    mut progress: impl FnMut(usize, &Resealed),
) -> Result<Vec<Resealed>, StoreError> {
    if store.keys.load().is_none() {
        return Err(StoreError::Backend(
            "the config has no [store.encryption] keys to seal under".into(),
        ));
    }
    let mut pace = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.001)));
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let pace = Mutex::new(pace);
    let mut passes = Vec::new();
    while passes.len() < PASSES {
        let counts = pass(store, scopes, &pace, |counts| {
            progress(passes.len() + 1, counts)
        })
        .await?;
        passes.push(counts);
        if counts.resealed == 0 && counts.busy == 0 {
            break;
        }
    }
    Ok(passes)
}

/// One pass over every record of `scopes`.
async fn pass(
    store: &Store,
    scopes: &[String],
    pace: &Mutex<Interval>,
    mut progress: impl FnMut(&Resealed),
) -> Result<Resealed, StoreError> {
    let mut counts = Resealed::default();
    for scope in scopes {
        for state in RecordState::ALL {
            let mut cursor: Option<Cursor> = None;
            loop {
                let page = store
                    .listing()
                    .list(&[scope.as_str()], Some(state), PAGE, cursor.as_ref())
                    .await?;
                let outcomes: Vec<Outcome> = stream::iter(page.records.iter().map(Ok))
                    .map_ok(|listed| reseal_one(store, store.key(scope, &listed.id), pace))
                    .try_buffer_unordered(PARALLEL)
                    .try_collect()
                    .await?;
                for outcome in outcomes {
                    counts.read += 1;
                    match outcome {
                        Outcome::Resealed => counts.resealed += 1,
                        Outcome::Current => counts.current += 1,
                        Outcome::Gone => counts.gone += 1,
                        Outcome::Busy => counts.busy += 1,
                        Outcome::Unreadable => counts.unreadable += 1,
                    }
                }
                progress(&counts);
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
    }
    Ok(counts)
}

async fn reseal_one(
    store: &Store,
    key: StoreKey,
    pace: &Mutex<Interval>,
) -> Result<Outcome, StoreError> {
    let key = &key;
    for _ in 0..TRIES {
        let Some((was, _)) = store.export(key).await? else {
            return Ok(Outcome::Gone);
        };
        let keys = store.keys.load_full().expect("checked before the run");
        let now = match reseal_record(&keys, store.scope_of(key), key.id(), &was) {
            Ok(Some(now)) => now,
            Ok(None) => return Ok(Outcome::Current),
            Err(_) => {
                // Counted and logged the way every unreadable read is.
                let _ = store.opened(key, was);
                return Ok(Outcome::Unreadable);
            }
        };
        pace.lock().await.tick().await;
        if store.reseal(key, &was, &now).await? {
            return Ok(Outcome::Resealed);
        }
    }
    Ok(Outcome::Busy)
}

impl Store {
    /// Write `now`'s content over `was`'s while `key` keeps exactly
    /// `was`'s: see [`Transfer::reseal`](super::Transfer::reseal).
    pub async fn reseal(
        &self,
        key: &StoreKey,
        was: &Record,
        now: &Record,
    ) -> Result<bool, StoreError> {
        self.deadline("reseal", async {
            on!(self.backend, b => Transfer::reseal(b, key, was, now).await)
        })
        .await
    }
}
