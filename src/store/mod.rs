//! The claim store: one record per scoped idempotency key, shared by every
//! gateway instance that uses the same backend.
//!
//! A record moves `Processing` → `Completed`, or `Processing` → `Released` →
//! `Processing` again when the upstream failed and the sender retries. The
//! contract is the [`Backend`] trait; every backend holds its invariants, and
//! `tests/it/conformance.rs` runs the same suite against each:
//!
//! - `claim` is atomic: of any number of concurrent claims of a key, exactly
//!   one gets [`ClaimOutcome::New`] with a fresh random fencing token.
//! - A `Processing` record whose lease expired (its holder died) is claimable
//!   again; the attempt count goes up by one.
//! - `renew`, `complete` and `release` compare the fencing token, so a holder
//!   whose lease expired and was taken over can never overwrite or delete its
//!   successor's claim. They answer `false` when the token no longer matches.
//! - A completed record, with the recorded response, lives for `retention`.
//! - With a replay guard, a claimable key (new, released, or with a lapsed
//!   lease) whose body already claimed another key is answered by that key's
//!   record while it is completed or in flight (see
//!   [`ClaimRequest::guard_key`]).
//!
//! [`Store`] wraps whichever backend is configured: it owns the key layout
//! (prefix, scope and hash tags), bounds every operation by the store
//! `timeout` (a slow store is an unavailable store, [`StoreError::Timeout`])
//! and times and counts it. Adding a backend is one file that implements
//! [`Backend`], one arm in [`Store::open`], and one line in the conformance
//! suite.

mod clock;
mod embedded;
mod memory;
mod postgres;
mod record;
mod redis;
mod settings;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

pub use self::clock::Clock;
pub use self::embedded::EmbeddedStore;
pub use self::memory::MemoryStore;
pub use self::postgres::{check_url as check_postgres_url, PostgresStore, MIGRATIONS};
pub(crate) use self::record::{new_token, settled};
pub use self::record::{ClaimOutcome, ClaimRequest, Deleted, Lease, Record, RecordState, StoreKey};
pub use self::redis::{check_url as check_redis_url, Cluster, RedisStore, Single};
pub use self::settings::{BackendSettings, StoreSettings, Synchronous};
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

/// The contract of a claim store backend (see the module doc for its
/// invariants). Keys arrive fully laid out by [`Store::key`].
pub trait Backend: Send + Sync + 'static {
    /// The `backend` name in `[store]`.
    const NAME: &'static str;
    /// Whether keys that one operation touches together (a key and its
    /// replay guard) must share a hash tag: Redis Cluster.
    const HASH_TAGS: bool = false;

    /// Claim `request.key` with fencing token `token` (chosen by [`Store`],
    /// so that it can release a claim whose answer it never got).
    fn claim(
        &self,
        request: ClaimRequest<'_>,
        token: &str,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Extend the lease of the holder of `token` to `processing_ttl` from now.
    fn renew(
        &self,
        key: &StoreKey,
        token: &str,
        processing_ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Record the final response; the record then lives for `retention`.
    fn complete(
        &self,
        key: &StoreKey,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Give the key up so the next delivery claims it; the attempt count stays.
    fn release(
        &self,
        key: &StoreKey,
        token: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    fn get(
        &self,
        key: &StoreKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// Forget the key, so its next delivery is processed again — unless a
    /// delivery holds a live claim on it and `force` is not set. Atomic: a
    /// claim taken between a check and the delete is never removed.
    fn delete(
        &self,
        key: &StoreKey,
        force: bool,
    ) -> impl Future<Output = Result<Deleted, StoreError>> + Send;

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Settings of the backend that would silently lose claims (Redis
    /// eviction, no persistence), as operator warnings; empty when fine or
    /// unknown.
    fn risks(&self, longest_retention: Duration) -> impl Future<Output = Vec<String>> + Send {
        let _ = longest_retention;
        async { Vec::new() }
    }
}

type Op<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// [`Backend`] behind a pointer, so [`Store`] holds any backend without a
/// type parameter. One allocation per operation; next to a store round trip
/// it does not show (BENCHMARKS.md).
trait DynBackend: Send + Sync {
    fn claim<'a>(&'a self, request: ClaimRequest<'a>, token: &'a str) -> Op<'a, ClaimOutcome>;
    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        processing_ttl: Duration,
    ) -> Op<'a, bool>;
    fn complete<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        response: &'a RecordedResponse,
        retention: Duration,
    ) -> Op<'a, bool>;
    fn release<'a>(&'a self, key: &'a StoreKey, token: &'a str) -> Op<'a, bool>;
    fn get<'a>(&'a self, key: &'a StoreKey) -> Op<'a, Option<Record>>;
    fn delete<'a>(&'a self, key: &'a StoreKey, force: bool) -> Op<'a, Deleted>;
    fn ping(&self) -> Op<'_, ()>;
    fn risks(
        &self,
        longest_retention: Duration,
    ) -> Pin<Box<dyn Future<Output = Vec<String>> + Send + '_>>;
}

impl<B: Backend> DynBackend for B {
    fn claim<'a>(&'a self, request: ClaimRequest<'a>, token: &'a str) -> Op<'a, ClaimOutcome> {
        Box::pin(Backend::claim(self, request, token))
    }
    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        processing_ttl: Duration,
    ) -> Op<'a, bool> {
        Box::pin(Backend::renew(self, key, token, processing_ttl))
    }
    fn complete<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        response: &'a RecordedResponse,
        retention: Duration,
    ) -> Op<'a, bool> {
        Box::pin(Backend::complete(self, key, token, response, retention))
    }
    fn release<'a>(&'a self, key: &'a StoreKey, token: &'a str) -> Op<'a, bool> {
        Box::pin(Backend::release(self, key, token))
    }
    fn get<'a>(&'a self, key: &'a StoreKey) -> Op<'a, Option<Record>> {
        Box::pin(Backend::get(self, key))
    }
    fn delete<'a>(&'a self, key: &'a StoreKey, force: bool) -> Op<'a, Deleted> {
        Box::pin(Backend::delete(self, key, force))
    }
    fn ping(&self) -> Op<'_, ()> {
        Box::pin(Backend::ping(self))
    }
    fn risks(
        &self,
        longest_retention: Duration,
    ) -> Pin<Box<dyn Future<Output = Vec<String>> + Send + '_>> {
        Box::pin(Backend::risks(self, longest_retention))
    }
}

/// The configured backend, with the key layout and the per-operation
/// deadline applied in one place.
pub struct Store {
    backend: Box<dyn DynBackend>,
    name: &'static str,
    key_prefix: String,
    hash_tags: bool,
    timeout: Duration,
    metrics: StoreMetrics,
}

/// What a forced release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForceRelease {
    Released,
    /// The key holds no live claim (completed, released, or it changed
    /// meanwhile).
    NotInFlight,
    NotFound,
}

impl Store {
    /// Build the configured backend. The embedded store opens (and locks) its
    /// file here, so a second instance fails at start-up. Redis connects
    /// lazily: a gateway starts (and answers 503) while Redis is down, and
    /// recovers by itself.
    pub fn open(
        settings: &StoreSettings,
        key_prefix: &str,
        metrics: StoreMetrics,
    ) -> Result<Store, StoreError> {
        let timeout = settings.timeout;
        Ok(match &settings.backend {
            BackendSettings::Memory => Store::new(
                MemoryStore::new(Clock::system()),
                key_prefix,
                timeout,
                metrics,
            ),
            BackendSettings::Embedded { path, synchronous } => {
                let backend = EmbeddedStore::open(path, *synchronous, Clock::system())?;
                Store::new(backend, key_prefix, timeout, metrics)
            }
            BackendSettings::Redis { url } => {
                let backend = RedisStore::connect(url, settings)?;
                Store::new(backend, key_prefix, timeout, metrics)
            }
            BackendSettings::RedisCluster { nodes } => {
                let backend = RedisStore::connect_cluster(nodes, settings)?;
                Store::new(backend, key_prefix, timeout, metrics)
            }
            BackendSettings::Postgres { url, pool_size } => {
                let backend = PostgresStore::connect(url, *pool_size, settings)?;
                Store::new(backend, key_prefix, timeout, metrics)
            }
        })
    }

    /// A store over `backend`, each operation bounded by `timeout`.
    pub fn new<B: Backend>(
        backend: B,
        key_prefix: &str,
        timeout: Duration,
        metrics: StoreMetrics,
    ) -> Store {
        Store {
            backend: Box::new(backend),
            name: B::NAME,
            key_prefix: key_prefix.to_owned(),
            hash_tags: B::HASH_TAGS,
            timeout,
            metrics,
        }
    }

    pub fn backend_name(&self) -> &'static str {
        self.name
    }

    /// The store key of `key` in `scope`: `{key_prefix}{scope}:{key}`. On a
    /// Redis Cluster the scope is a hash tag, `{key_prefix}{{scope}}:{key}`,
    /// so a key and its replay guard live in one slot (and so does the
    /// scope; see docs/operations.md).
    pub fn key(&self, scope: &str, key: &str) -> StoreKey {
        StoreKey::event(&self.source(scope), key)
    }

    /// The replay guard of a verified body in `scope`:
    /// `{key_prefix}{scope}#body-sha256:{hex}`.
    pub fn guard_key(&self, scope: &str, body_sha256: &str) -> StoreKey {
        StoreKey::guard(&self.source(scope), body_sha256)
    }

    fn source(&self, scope: &str) -> String {
        if self.hash_tags {
            format!("{}{{{scope}}}", self.key_prefix)
        } else {
            format!("{}{scope}", self.key_prefix)
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

    /// Backend settings that would silently lose claims, as warnings.
    pub async fn risks(&self, longest_retention: Duration) -> Vec<String> {
        tokio::time::timeout(self.timeout, self.backend.risks(longest_retention))
            .await
            .unwrap_or_default()
    }

    /// Claim a key. A claim whose answer does not arrive in time may still
    /// have been applied — the store was merely slow — and would then block
    /// every retry of the event, 409, for `processing_ttl` under a token
    /// nobody holds: so a failed claim is released again with its token (a
    /// no-op when it was not applied).
    pub async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let token = new_token();
        let result = self
            .deadline("claim", self.backend.claim(request, &token))
            .await;
        if result.is_err() {
            let undo = self.backend.release(request.key, &token);
            if let Ok(Ok(true)) = tokio::time::timeout(self.timeout, undo).await {
                tracing::info!(key = %request.key, "released a claim whose answer was lost");
            }
        }
        result
    }

    pub async fn renew(
        &self,
        key: &StoreKey,
        lease: &Lease,
        processing_ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.deadline(
            "renew",
            self.backend.renew(key, &lease.token, processing_ttl),
        )
        .await
    }

    pub async fn complete(
        &self,
        key: &StoreKey,
        lease: &Lease,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let op = self
            .backend
            .complete(key, &lease.token, response, retention);
        self.deadline("complete", op).await
    }

    pub async fn release(&self, key: &StoreKey, lease: &Lease) -> Result<bool, StoreError> {
        self.deadline("release", self.backend.release(key, &lease.token))
            .await
    }

    pub async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        self.deadline("get", self.backend.get(key)).await
    }

    /// Forget `key` unless it is in flight (or `force`); see [`Backend::delete`].
    pub async fn delete(&self, key: &StoreKey, force: bool) -> Result<Deleted, StoreError> {
        self.deadline("delete", self.backend.delete(key, force))
            .await
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.deadline("ping", self.backend.ping()).await
    }

    /// Release a claim whatever its holder (admin): compare-and-set on the
    /// token it holds now, so a claim that completes meanwhile is left alone.
    pub async fn force_release(&self, key: &StoreKey) -> Result<ForceRelease, StoreError> {
        let Some(record) = self.get(key).await? else {
            return Ok(ForceRelease::NotFound);
        };
        let Some(token) = record.token else {
            return Ok(ForceRelease::NotInFlight);
        };
        let lease = Lease {
            token,
            attempt: record.attempts,
        };
        Ok(if self.release(key, &lease).await? {
            ForceRelease::Released
        } else {
            ForceRelease::NotInFlight
        })
    }
}
