//! The claim store: one record per scoped idempotency key, shared by every
//! gateway instance that uses the same backend.
//!
//! A record moves `Processing` → `Completed`, or `Processing` → `Released` →
//! `Processing` again when the upstream failed and the sender retries. Its
//! invariants, held by every backend:
//!
//! - `claim` is atomic: of any number of concurrent claims of a key, exactly
//!   one gets [`ClaimOutcome::New`] with a fresh random fencing token.
//! - A `Processing` record whose lease expired (its holder died) is claimable
//!   again; the attempt count goes up by one.
//! - `renew`, `complete` and `release` compare the fencing token, so a holder
//!   whose lease expired and was taken over can never overwrite or delete its
//!   successor's claim. They answer `false` when the token no longer matches.
//! - A completed record, with the recorded response, lives for `retention`.
//! - With a replay guard, a new key whose body already claimed another key
//!   is answered by that key's record (see [`ClaimRequest::guard_key`]).
//!
//! Every operation is bounded by the store `timeout`; a slow store is an
//! unavailable store ([`StoreError::Timeout`]).

mod embedded;
mod memory;
mod redis;

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

pub use self::embedded::EmbeddedStore;
pub use self::memory::MemoryStore;
pub use self::redis::{Cluster, RedisStore, Single};
use crate::config::{Backend, StoreSettings};
use crate::metrics::StoreMetrics;
use crate::replay::RecordedResponse;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store operation timed out")]
    Timeout,
    #[error("store backend error: {0}")]
    Backend(String),
    #[error("store holds a record hookgate cannot read: {0}")]
    Corrupt(String),
}

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
    pub lease_until_ms: Option<u64>,
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

/// What a claim writes, besides the key.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub key: &'a str,
    pub body_sha256: &'a str,
    pub lease: Duration,
    /// How long the record lives (reset by claim and complete).
    pub retention: Duration,
    /// Replay guard: a key naming the verified body. When `key` is new but
    /// this body already claimed another key, that key's state answers
    /// (completed → replay, live claim → in flight). A fresh claim points the
    /// guard at `key` for `retention`.
    pub guard_key: Option<&'a str>,
}

/// The configured backend, with the per-operation deadline applied in one
/// place.
pub struct Store {
    backend: StoreBackend,
    timeout: Duration,
    metrics: StoreMetrics,
}

enum StoreBackend {
    Memory(MemoryStore),
    Embedded(EmbeddedStore),
    Redis(RedisStore<Single>),
    /// Boxed: the cluster client is large, and there is one store per process.
    RedisCluster(Box<RedisStore<Cluster>>),
}

/// Dispatch one call to whichever backend is configured, under the deadline,
/// timed and counted as `$op`.
macro_rules! dispatch {
    ($self:ident, $op:literal, $store:ident => $call:expr) => {
        $self
            .deadline($op, async {
                match &$self.backend {
                    StoreBackend::Memory($store) => $call.await,
                    StoreBackend::Embedded($store) => $call.await,
                    StoreBackend::Redis($store) => $call.await,
                    StoreBackend::RedisCluster($store) => $call.await,
                }
            })
            .await
    };
}

impl Store {
    /// Build the configured backend. The embedded store opens (and locks) its
    /// file here, so a second instance fails at start-up. Redis connects lazily: a gateway starts
    /// (and answers 503) while Redis is down, and recovers by itself.
    pub fn open(settings: &StoreSettings, metrics: StoreMetrics) -> Result<Store, StoreError> {
        let backend = match &settings.backend {
            Backend::Memory => StoreBackend::Memory(MemoryStore::new()),
            Backend::Embedded { path, synchronous } => {
                StoreBackend::Embedded(EmbeddedStore::open(path, *synchronous)?)
            }
            Backend::Redis { url } => StoreBackend::Redis(RedisStore::connect(url, settings)?),
            Backend::RedisCluster { nodes } => {
                StoreBackend::RedisCluster(Box::new(RedisStore::connect_cluster(nodes, settings)?))
            }
        };
        Ok(Store {
            backend,
            timeout: settings.timeout,
            metrics,
        })
    }

    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            StoreBackend::Memory(_) => "memory",
            StoreBackend::Embedded(_) => "embedded",
            StoreBackend::Redis(_) => "redis",
            StoreBackend::RedisCluster(_) => "redis-cluster",
        }
    }

    async fn deadline<T>(
        &self,
        name: &'static str,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, op)
            .await
            .unwrap_or(Err(StoreError::Timeout));
        self.metrics
            .observe(name, started.elapsed(), result.is_err());
        result
    }

    /// Settings of the backend that would silently lose claims (Redis
    /// eviction, no persistence), as operator warnings. Empty when fine or
    /// unknown.
    pub async fn risks(&self, longest_retention: Duration) -> Vec<String> {
        match &self.backend {
            StoreBackend::Redis(store) => {
                tokio::time::timeout(self.timeout, store.risks(longest_retention))
                    .await
                    .unwrap_or_default()
            }
            StoreBackend::RedisCluster(store) => {
                tokio::time::timeout(self.timeout, store.risks(longest_retention))
                    .await
                    .unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }

    /// Whether keys are spread over cluster slots, so keys that one script
    /// touches together need a common hash tag.
    pub fn is_cluster(&self) -> bool {
        matches!(self.backend, StoreBackend::RedisCluster(_))
    }

    pub async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        dispatch!(self, "claim", store => store.claim(request))
    }

    pub async fn renew(&self, key: &str, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
        dispatch!(self, "renew", store => store.renew(key, &lease.token, ttl))
    }

    pub async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        dispatch!(self, "complete", store => store.complete(key, &lease.token, response, retention))
    }

    pub async fn release(&self, key: &str, lease: &Lease) -> Result<bool, StoreError> {
        dispatch!(self, "release", store => store.release(key, &lease.token))
    }

    pub async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        dispatch!(self, "get", store => store.get(key))
    }

    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        dispatch!(self, "delete", store => store.delete(key))
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self, "ping", store => store.ping())
    }
}

/// A fresh fencing token: 128 random bits, hex.
pub(crate) fn new_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// Wall-clock Unix milliseconds (the memory store's clock; Redis uses its own
/// `TIME` so that all gateways share one clock).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The answer a live record gives a claim — its recording when completed,
/// in flight while its lease runs — or `None` when it may be claimed.
pub(crate) fn settled(record: Record, now_ms: u64) -> Option<ClaimOutcome> {
    match (record.state, record.lease_until_ms) {
        (RecordState::Completed, _) => Some(ClaimOutcome::Completed(record)),
        (RecordState::Processing, Some(until)) if until > now_ms => Some(ClaimOutcome::InFlight {
            retry_after: retry_after(until, now_ms),
        }),
        _ => None,
    }
}

/// Retry-After for a live claim: the rest of its lease, at least a second.
pub(crate) fn retry_after(lease_until_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(lease_until_ms.saturating_sub(now_ms)).max(Duration::from_secs(1))
}
