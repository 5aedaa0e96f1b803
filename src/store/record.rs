//! What the store holds and answers: records, their states, claims and
//! their outcomes — the vocabulary every backend shares.

use std::time::Duration;

use serde::Serialize;

use crate::replay::RecordedResponse;

/// Where a record is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// A delivery holds the claim and is calling the upstream.
    Processing,
    /// The upstream failed (not final); the next delivery claims again.
    Released,
    /// The upstream answered finally; later deliveries get the recording.
    Completed,
}

impl RecordState {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::Processing => "processing",
            RecordState::Released => "released",
            RecordState::Completed => "completed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            RecordState::Processing,
            RecordState::Released,
            RecordState::Completed,
        ]
        .into_iter()
        .find(|state| state.as_str() == text)
    }
}

/// What the store knows about one key.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub state: RecordState,
    /// Fencing token of the current holder; only while `Processing`.
    pub token: Option<String>,
    /// Hex SHA-256 of the body that claimed the key.
    pub body_sha256: String,
    /// How many deliveries were forwarded (claims taken).
    pub attempts: u32,
    /// Unix milliseconds of the first claim.
    pub first_seen_ms: u64,
    /// Unix milliseconds the lease runs out; only while `Processing`.
    pub lease_expires_at_ms: Option<u64>,
    pub completed_at_ms: Option<u64>,
    /// The recorded upstream response; only when `Completed`.
    pub response: Option<RecordedResponse>,
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
/// for a replay guard, where the source is `{key_prefix}{scope}` (with the
/// scope as a hash tag on a Redis Cluster). Backends that keep one string
/// key use [`StoreKey::as_str`]; PostgreSQL keeps the two parts in columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreKey {
    full: String,
    source_len: usize,
}

impl StoreKey {
    /// The key of event `id` in `source`.
    pub fn event(source: &str, id: &str) -> Self {
        Self {
            full: format!("{source}:{id}"),
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
}

/// A fresh fencing token: 128 random bits, hex.
pub(crate) fn new_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// The answer a live record gives a claim — its recording when completed,
/// in flight while its lease runs — or `None` when it may be claimed.
pub(crate) fn settled(record: Record, now_ms: u64) -> Option<ClaimOutcome> {
    match (record.state, record.lease_expires_at_ms) {
        (RecordState::Completed, _) => Some(ClaimOutcome::Completed(record)),
        (RecordState::Processing, Some(until)) if until > now_ms => Some(ClaimOutcome::InFlight {
            retry_after: retry_after(until, now_ms),
        }),
        _ => None,
    }
}

/// Retry-After for a live claim: the rest of its lease, at least a second.
fn retry_after(lease_expires_at_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(lease_expires_at_ms.saturating_sub(now_ms)).max(Duration::from_secs(1))
}
