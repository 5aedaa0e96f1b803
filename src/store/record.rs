//! What the store holds and answers: records, their states, claims and
//! their outcomes — the vocabulary every backend shares.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method};
use serde::Serialize;

use super::history::{FailureClass, LastError, PastAttempt};
use super::order::{OrderSpot, Ordered};
use crate::replay::RecordedResponse;

/// Where a record is in its life (docs/guide/dead-letters.md, "Failed events and dead letters"): `Processing` → `Completed`,
/// or `Failed` (the sender's retry claims it again) → … → `Dead` after
/// `max_attempts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// A delivery holds the claim and is calling the upstream.
    Processing,
    /// Accepted for asynchronous delivery (docs/guide/async-delivery.md, "Asynchronous delivery"), waiting for a worker:
    /// new, or due again after a failed attempt.
    Queued,
    /// The last attempt did not finish; the next delivery claims again.
    Failed,
    /// Parked after `max_attempts`: deliveries are answered
    /// `dead_letter_status` and nothing is forwarded until an operator acts.
    Dead,
    /// The upstream answered finally; later deliveries get the recording.
    Completed,
    /// An ordered event older (`stale_by`) than the newest one already
    /// delivered for its entity: not delivered, kept like a dead letter
    /// (docs/guide/ordering.md, "Ordered delivery").
    Stale,
}

impl RecordState {
    pub const ALL: [RecordState; 6] = [
        RecordState::Processing,
        RecordState::Queued,
        RecordState::Failed,
        RecordState::Dead,
        RecordState::Completed,
        RecordState::Stale,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::Processing => "processing",
            RecordState::Queued => "queued",
            RecordState::Failed => "failed",
            RecordState::Dead => "dead",
            RecordState::Completed => "completed",
            RecordState::Stale => "stale",
        }
    }

    /// Every state's name, for messages and help: `processing, queued,
    /// failed, dead, completed or stale`.
    pub fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|state| state.as_str()).collect();
        match names.split_last() {
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// Also reads `released`, what a failed record was called before dead
    /// letters existed.
    pub fn parse(text: &str) -> Option<Self> {
        if text == "released" {
            return Some(RecordState::Failed);
        }
        Self::ALL.into_iter().find(|state| state.as_str() == text)
    }
}

/// The request as hookgate forwarded it, kept on failed and dead records
/// (and on replays) so an operator can send it again: method, the query
/// string, the headers the upstream got (signature headers included) and
/// the body byte for byte.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRequest {
    pub method: Method,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl StoredRequest {
    /// Rebuild a stored request from its stored parts.
    pub fn decode(
        method: &str,
        query: Option<String>,
        headers: &[u8],
        body: Bytes,
    ) -> Result<Self, String> {
        Ok(Self {
            method: Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?,
            query,
            headers: crate::headers::decode_lines(headers)?,
            body,
        })
    }

    /// The headers as stored (`name: value` lines).
    pub fn encode_headers(&self) -> Vec<u8> {
        crate::headers::encode_lines(&self.headers)
    }
}

/// What the store knows about one key.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub state: RecordState,
    /// Fencing token of the current holder: while `Processing`, and while a
    /// failed attempt's outcome is unknown and its claim is held.
    pub token: Option<String>,
    /// Hex SHA-256 of the body that claimed the key.
    pub body_sha256: String,
    /// How many deliveries were forwarded (claims taken).
    pub attempts: u32,
    /// Unix milliseconds of the first claim.
    pub first_seen_ms: u64,
    /// Unix milliseconds of the last change of state (listings are newest
    /// first by it).
    pub updated_ms: u64,
    /// Unix milliseconds the lease runs out: while `Processing`, or while a
    /// failed claim is held.
    pub lease_expires_at_ms: Option<u64>,
    pub completed_at_ms: Option<u64>,
    /// Async events only: when a delivery worker takes the event up — its
    /// next attempt while queued, the end of the worker's lease while one
    /// holds it (so a crashed worker's event is taken up again).
    pub next_attempt_ms: Option<u64>,
    /// The recorded upstream response; only when `Completed`.
    pub response: Option<RecordedResponse>,
    pub last_error: Option<LastError>,
    /// The route whose request is stored.
    pub route: Option<String>,
    /// For a replay: the key of the event it replays.
    pub replay_of: Option<String>,
    /// The request, once an attempt failed (or for a replay); absent from
    /// listings.
    pub request: Option<StoredRequest>,
    /// Accepted for asynchronous delivery: the sender was answered 2xx, so
    /// the queue owes it a delivery. Whatever ends a holder's attempt — a
    /// failure, a release, a lapsed lease — the event goes back to its
    /// queue, whichever entrance held it and whatever mode its route has
    /// now. Set by an acceptance, kept to the record's end.
    pub accepted: bool,
    /// The last failed attempts, oldest first (see [`history`](super::history));
    /// absent from listings.
    pub history: Vec<PastAttempt>,
    /// An ordered event's entity and place (docs/guide/ordering.md, "Ordered delivery").
    pub order: Option<Ordered>,
}

impl Record {
    /// A fresh record of a claim at `now_ms`, for backends that build it
    /// in memory.
    pub fn claimed(token: &str, body_sha256: &str, attempts: u32, now_ms: u64) -> Self {
        Record {
            state: RecordState::Processing,
            token: Some(token.to_owned()),
            body_sha256: body_sha256.to_owned(),
            attempts,
            first_seen_ms: now_ms,
            updated_ms: now_ms,
            lease_expires_at_ms: None,
            completed_at_ms: None,
            next_attempt_ms: None,
            response: None,
            last_error: None,
            route: None,
            replay_of: None,
            request: None,
            accepted: false,
            history: Vec::new(),
            order: None,
        }
    }

    /// This record as a listing shows it: without request or response.
    pub fn summary(mut self) -> Self {
        self.request = None;
        self.response = None;
        self.history = Vec::new();
        self
    }
}

/// Proof of holding a claim: pass it back to `renew`, `complete`, `release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub token: String,
    /// 1 for the first forward of this key, 2 after one release, …
    pub attempt: u32,
}

#[derive(Debug)]
pub enum ClaimOutcome {
    /// This delivery owns the key: forward it.
    New(Lease),
    /// Another delivery holds a live claim.
    InFlight {
        /// Until the current lease runs out (at least a second).
        retry_after: Duration,
    },
    /// The key finished; replay its recording.
    Completed(Record),
    /// The event is parked as a dead letter.
    Dead(Record),
    /// Stored and queued for a worker: an acceptance (`ClaimMode::Accept`,
    /// or one that met a failed record), or an operator's redelivery of a
    /// queued event, now due at once.
    Queued,
}

/// What `delete` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    /// Left alone: a delivery holds a live claim and may still be calling
    /// the upstream (forgetting it would let a duplicate through beside it).
    InFlight,
    NotFound,
}

/// A stored key: `{source}:{id}` for an event, `{source}#body-sha256:{hex}`
/// for a replay guard, where the source is `{key_prefix}{scope}`, or one
/// shard's namespace (a hash tag per shard on a Redis Cluster,
/// `Backend::namespace`). Backends that keep one string
/// key use [`StoreKey::as_str`]; PostgreSQL keeps the two parts in columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreKey {
    full: String,
    source_len: usize,
}

impl StoreKey {
    /// The key of event `id` in `source`.
    pub fn event(source: &str, id: &str) -> Self {
        // Built once per delivery: sized at once, without `format!`'s
        // machinery and regrowth.
        let mut full = String::with_capacity(source.len() + 1 + id.len());
        full.push_str(source);
        full.push(':');
        full.push_str(id);
        Self {
            full,
            source_len: source.len(),
        }
    }

    /// The replay guard of a body in `source`. The scope part of a source
    /// is `[a-z0-9_-]+`, so the `#` keeps guards out of the event keys'
    /// namespace whatever a sender puts in its delivery id.
    pub fn guard(source: &str, body_sha256: &str) -> Self {
        Self {
            full: format!("{source}#body-sha256:{body_sha256}"),
            source_len: source.len(),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.full
    }

    /// `{key_prefix}{scope}`.
    pub fn source(&self) -> &str {
        &self.full[..self.source_len]
    }

    /// The event id (or, for a guard, `body-sha256:{hex}`).
    pub fn id(&self) -> &str {
        &self.full[self.source_len + 1..]
    }
}

impl std::fmt::Display for StoreKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.full)
    }
}

/// Who is claiming: a sender's delivery, or an operator's redelivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimMode {
    /// A delivery: a dead letter answers `Dead`, a completed key `Completed`.
    Deliver,
    /// An operator's redelivery: a dead or failed record is claimed, and a
    /// completed one too when `force` is set. A live claim is never taken.
    Redeliver { force: bool },
    /// An async route's acceptance (docs/guide/async-delivery.md, "Asynchronous delivery"): a new key is stored with its
    /// request as `Queued`, due now, in one write; any live record answers.
    Accept,
    /// The hybrid `respond_within`: accepted as with `Accept`, and claimed
    /// by this delivery at once; if its lease lapses, a worker takes over.
    AcceptClaimed,
}

impl ClaimMode {
    /// As the backends' scripts and statements take it: 0 a delivery, 1 a
    /// redelivery, 2 a forced one.
    pub fn code(self) -> u8 {
        match self {
            ClaimMode::Deliver => 0,
            ClaimMode::Redeliver { force: false } => 1,
            ClaimMode::Redeliver { force: true } => 2,
            ClaimMode::Accept => 3,
            ClaimMode::AcceptClaimed => 4,
        }
    }

    /// Whether this claim accepts an async event (nothing is taken over).
    pub fn accepts(self) -> bool {
        matches!(self, ClaimMode::Accept | ClaimMode::AcceptClaimed)
    }
}

/// A request stored along with a claim (a replay, an async delivery).
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    pub request: &'a StoredRequest,
    pub route: &'a str,
    pub replay_of: Option<&'a str>,
}

/// What a claim writes, besides the key.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub key: &'a StoreKey,
    pub body_sha256: &'a str,
    /// How long the claim holds before another delivery may take it over
    /// (renewed while the upstream call runs).
    pub processing_ttl: Duration,
    /// How long the record lives (reset by claim and complete).
    pub retention: Duration,
    /// Replay guard: a key naming the verified body. When `key` may be
    /// claimed (new, released, or its lease lapsed) but this body already
    /// claimed another key, that key's state answers (completed → replay,
    /// live claim → in flight) — so a delivery that failed and is retried
    /// after the same body completed under another key is a duplicate too. A
    /// fresh claim points the guard at `key` for `retention`.
    pub guard_key: Option<&'a StoreKey>,
    pub mode: ClaimMode,
    /// Kept with the claim; `None` keeps whatever request the record holds.
    pub stored: Option<Stored<'a>>,
    /// An acceptance's place in its entity's order; `None`: unordered.
    pub order: Option<OrderSpot<'a>>,
}

impl<'a> ClaimRequest<'a> {
    /// With the replay guard's key (a sender's delivery of a route with
    /// `replay_guard`).
    pub fn guarded(self, guard_key: Option<&'a StoreKey>) -> Self {
        Self { guard_key, ..self }
    }

    /// At its place in its entity's order (an ordered route's acceptance).
    pub fn ordered(self, order: Option<OrderSpot<'a>>) -> Self {
        Self { order, ..self }
    }

    /// A claim of `key` that is no route's event (a reconciliation lease,
    /// a test), without replay guard or stored request; a route's claims
    /// are `RouteConfig::claim_*`.
    pub fn delivery(
        key: &'a StoreKey,
        body_sha256: &'a str,
        processing_ttl: Duration,
        retention: Duration,
    ) -> Self {
        Self {
            key,
            body_sha256,
            processing_ttl,
            retention,
            guard_key: None,
            mode: ClaimMode::Deliver,
            stored: None,
            order: None,
        }
    }
}

/// A sync record's future after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncNext {
    /// The sender's retry claims it again; with `hold`, only once the lease
    /// runs out (the outcome is unknown and the upstream may still work).
    Failed { hold: bool },
    /// Parked as a dead letter.
    Dead,
}

/// Both futures of a failed attempt (see `delivery::policy`): the store
/// applies the one that fits the record — `queued` to an accepted record,
/// `sync` to the others — in the write that ends the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    pub sync: SyncNext,
    /// An accepted record: due again after this wait; `None`: dead.
    pub queued: Option<Duration>,
}

/// How an attempt failed, as `fail` records it.
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    pub class: FailureClass,
    pub status: Option<u16>,
    pub request: &'a StoredRequest,
    /// The attempt, as the record's history keeps it.
    pub attempt: &'a PastAttempt,
    pub route: &'a str,
    /// How long the failed or dead record lives (`dead_letter_retention`).
    pub retention: Duration,
    pub next: Next,
}

impl Failure<'_> {
    /// The state a record is left in, by whether it was `accepted`.
    pub fn state(&self, accepted: bool) -> RecordState {
        match (accepted, self.next.queued, self.next.sync) {
            (true, Some(_), _) => RecordState::Queued,
            (true, None, _) | (false, _, SyncNext::Dead) => RecordState::Dead,
            (false, _, SyncNext::Failed { .. }) => RecordState::Failed,
        }
    }

    /// Whether the token and lease stay (a sync record's unknown outcome,
    /// held).
    pub fn holds(&self, accepted: bool) -> bool {
        !accepted && self.next.sync == SyncNext::Failed { hold: true }
    }

    /// When an accepted record is due again.
    pub fn due_in(&self, accepted: bool) -> Option<Duration> {
        self.next.queued.filter(|_| accepted)
    }
}

/// An async event a worker leased: deliver `record.request` under `lease`.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: String,
    pub lease: Lease,
    pub record: Record,
}

/// What one ordered lease did (`Queue::lease_ordered`): the events leased,
/// and those found stale on the way (now `Stale`, never to be delivered).
#[derive(Debug, Clone, Default)]
pub struct Leased {
    pub due: Vec<Due>,
    pub stale: Vec<String>,
}

/// What a scope holds queued: its events waiting for their delivery
/// (queued, or due again after a failure) and the bytes the store keeps
/// for them (`Listing::queued`; docs/guide/async-delivery.md, "Asynchronous delivery").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Queued {
    pub events: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Queued {
    fn add_assign(&mut self, other: Queued) {
        self.events += other.events;
        self.bytes += other.bytes;
    }
}

/// Which records a listing returns: those of `source` in `state`, newest
/// first by `(updated_ms, id)`, strictly before `before` when given (`None`
/// for the id: every id at that time is before).
#[derive(Debug, Clone, Copy)]
pub struct ListQuery<'a> {
    pub source: &'a str,
    pub state: RecordState,
    pub limit: usize,
    pub before: Option<(u64, Option<&'a str>)>,
}

impl ListQuery<'_> {
    /// Whether a record at `(updated_ms, id)` belongs after the cursor.
    pub fn admits(&self, updated_ms: u64, id: &str) -> bool {
        match self.before {
            None => true,
            Some((ms, bound)) => {
                updated_ms < ms || (updated_ms == ms && bound.is_none_or(|bound| id < bound))
            }
        }
    }
}

/// A fresh fencing token: 128 random bits, hex.
pub(crate) fn new_token() -> String {
    // One per claim: written through a buffer, not `hex::encode`'s
    // char-by-char iterator (1.2k instructions of a delivery's 116k).
    crate::headers::lower_hex(&rand::random::<[u8; 16]>())
}

/// What a claim in `mode` does to a live record: the rules of the record's
/// life (docs/operations/README.md), in one place. Memory, embedded and PostgreSQL
/// apply the decision inside their atomic step; the Redis claim script
/// mirrors it line by line.
#[derive(Debug)]
pub(crate) enum Decision {
    /// The record answers; nothing changes.
    Answer(ClaimOutcome),
    /// Take the record over under the new token: processing, attempts + 1.
    /// An accepted record (or one an acceptance claims) stays owed to its
    /// queue: due again when the new lease ends.
    TakeOver,
    /// An acceptance of a record nobody holds (failed, or its sync holder
    /// died): stored, accepted, queued and due now; attempts kept.
    Queue,
    /// An acceptance meeting a sync record under a live lease: the record
    /// turns accepted, due when the lease ends, so the holder's failure (or
    /// death) queues it instead of leaving it failed. A held failure's
    /// token is dropped and it waits in the queue. Answers with the outcome.
    Adopt(ClaimOutcome),
    /// An operator's redelivery of a queued event: due now; answers
    /// [`ClaimOutcome::Queued`].
    MakeDue,
}

pub(crate) fn decide(record: Record, now_ms: u64, mode: ClaimMode) -> Decision {
    let lease = record.lease_expires_at_ms.filter(|until| *until > now_ms);
    let in_flight = |until: u64| {
        Decision::Answer(ClaimOutcome::InFlight {
            retry_after: retry_after(until, now_ms),
        })
    };
    let operator = matches!(mode, ClaimMode::Redeliver { .. });
    match record.state {
        RecordState::Completed if mode == (ClaimMode::Redeliver { force: true }) => {
            Decision::TakeOver
        }
        RecordState::Completed => Decision::Answer(ClaimOutcome::Completed(record)),
        // A stale event is sent again only on purpose, out of its order.
        RecordState::Dead | RecordState::Stale if operator => Decision::TakeOver,
        RecordState::Dead | RecordState::Stale => Decision::Answer(ClaimOutcome::Dead(record)),
        // A queued event belongs to the workers; an operator makes it due.
        RecordState::Queued if operator => Decision::MakeDue,
        RecordState::Queued => in_flight(record.next_attempt_ms.unwrap_or(now_ms)),
        RecordState::Processing | RecordState::Failed => match lease {
            Some(_) if mode.accepts() && !record.accepted => Decision::Adopt(match record.state {
                RecordState::Failed => ClaimOutcome::Queued,
                _ => ClaimOutcome::InFlight {
                    retry_after: retry_after(lease.unwrap_or(now_ms), now_ms),
                },
            }),
            Some(until) => in_flight(until),
            // A worker's lapsed lease: the event is due, a worker takes it.
            None if mode.accepts()
                && record.accepted
                && record.state == RecordState::Processing =>
            {
                in_flight(now_ms)
            }
            None if mode == ClaimMode::Accept => Decision::Queue,
            None => Decision::TakeOver,
        },
    }
}

/// The answer a live record gives a claim in `mode`, or `None` when the
/// claim would change it.
pub(crate) fn settled(record: Record, now_ms: u64, mode: ClaimMode) -> Option<ClaimOutcome> {
    match decide(record, now_ms, mode) {
        Decision::Answer(answer) => Some(answer),
        _ => None,
    }
}

/// Whether a delete without `force` must leave `record` alone: a live
/// lease (its holder may still be calling the upstream), or a queued event
/// the queue still owes a delivery.
pub(crate) fn keeps_without_force(record: &Record, now_ms: u64) -> bool {
    record.state == RecordState::Queued
        || record
            .lease_expires_at_ms
            .is_some_and(|until| until > now_ms)
}

/// Retry-After for a live claim: the rest of its lease, at least a second.
fn retry_after(lease_expires_at_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(lease_expires_at_ms.saturating_sub(now_ms)).max(Duration::from_secs(1))
}
