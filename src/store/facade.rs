//! [`Store`]: the configured backend behind one facade that owns the key
//! layout (prefix, scope, shards and hash tags), bounds every operation by
//! the store `timeout`, times and counts it, keeps the replay cache in step
//! and seals what records keep (`[store.encryption]`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::time::Instant;

use super::backend::{Fleet, Health, Transfer};
use super::backends::{on, Backends};
use super::refusals::Refusals;
use super::shards::Shards;
use super::{
    Backend, BackendSettings, Clock, EmbeddedStore, Invalidations, MemoryStore, PostgresStore,
    Record, RedisStore, Refused, ReplayCache, StoreError, StoreKey, StoreSettings,
};
use crate::metrics::StoreMetrics;
use crate::seal::Keys;

/// How long learning a store's layout may take (`Store::learn_layout`).
const LAYOUT_TIMEOUT: Duration = Duration::from_secs(60);

/// The configured backend, with the key layout and the per-operation
/// deadline applied in one place.
pub struct Store {
    pub(super) backend: Backends,
    pub(super) name: &'static str,
    pub(super) key_prefix: String,
    /// The backend's [`Backend::namespace`].
    pub(super) namespace: fn(&str, &str, Option<u16>) -> String,
    /// The shards of each scope (one: each scope is one namespace).
    pub(super) shards: Shards,
    /// The backend's [`Backend::SHARDABLE`].
    pub(super) shardable: bool,
    pub(super) timeout: Duration,
    pub(super) metrics: StoreMetrics,
    /// Completed records kept in process (`store.replay_cache`); none when
    /// switched off or the backend has no invalidation feed yet.
    pub(super) cache: Option<Arc<ReplayCache>>,
    /// `[store.encryption]` keys (docs/guide/stores.md, "Data at rest"): with them, what
    /// a record keeps of a request or an answer is sealed ([`sealed`]).
    pub(super) keys: ArcSwapOption<Keys>,
    /// Operations the store answers but refuses, by source.
    pub(super) refusals: Refusals,
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
        clock: &Clock,
    ) -> Result<Store, StoreError> {
        let timeout = settings.timeout;
        Ok(match &settings.backend {
            BackendSettings::Memory => Store::new(
                MemoryStore::new(clock.clone()),
                key_prefix,
                timeout,
                metrics,
            ),
            BackendSettings::Embedded { path, synchronous } => {
                let backend = EmbeddedStore::open(path, *synchronous, clock.clone())?;
                Store::new(backend, key_prefix, timeout, metrics)
            }
            BackendSettings::Redis { url } => {
                let backend = RedisStore::connect(url, settings)?;
                let backend = backend.reporting(metrics.packed_claims.clone());
                Store::new(backend, key_prefix, timeout, metrics)
            }
            BackendSettings::RedisSentinel {
                sentinels,
                master,
                url,
            } => {
                let backend =
                    RedisStore::connect_sentinel(sentinels, master, url.as_deref(), settings)?;
                let backend = backend.reporting(metrics.packed_claims.clone());
                Store::new(backend, key_prefix, timeout, metrics)
            }
            BackendSettings::RedisCluster { nodes, .. } => {
                let backend = RedisStore::connect_cluster(nodes, settings)?;
                let backend = backend.reporting(metrics.packed_claims.clone());
                Store::new(backend, key_prefix, timeout, metrics)
            }
            BackendSettings::Postgres { url, pool_size } => {
                let backend = PostgresStore::connect(url, *pool_size, settings)?;
                Store::new(backend, key_prefix, timeout, metrics)
            }
        })
    }

    /// A store over `backend`, each operation bounded by `timeout`.
    pub fn new<B: Backend + Into<Backends>>(
        backend: B,
        key_prefix: &str,
        timeout: Duration,
        metrics: StoreMetrics,
    ) -> Store {
        Store {
            backend: backend.into(),
            name: B::NAME,
            key_prefix: key_prefix.to_owned(),
            namespace: B::namespace,
            shards: Shards::new(1),
            shardable: B::SHARDABLE,
            timeout,
            refusals: Refusals::new(metrics.refusing.clone()),
            metrics,
            cache: None,
            keys: ArcSwapOption::empty(),
        }
    }

    /// The operations the store answers but refuses now, oldest first,
    /// each with its source shown without the key prefix — the scope, and
    /// its shard where scopes are spread (`store/refusals.rs`).
    pub fn refused(&self) -> Vec<Refused> {
        let mut all = self.refusals.all();
        for refused in &mut all {
            if let Some(scope) = refused.source.strip_prefix(&self.key_prefix) {
                refused.source = scope.to_owned();
            }
        }
        all
    }

    /// The refusals standing on `scope`'s sources.
    pub fn refused_in(&self, scope: &str) -> Vec<Refused> {
        let sources = self.sources(scope);
        (self.refusals.all().into_iter())
            .filter(|refused| sources.contains(&refused.source))
            .collect()
    }

    /// Keep completed records in process, up to `budget` bytes (0: off),
    /// where the backend lets every instance's copy be invalidated: at once
    /// for a store only this process writes, else once the feed is
    /// connected (a task that follows it is started here).
    pub fn with_replay_cache(mut self, budget: usize) -> Store {
        if budget == 0 {
            return self;
        }
        let cache = match on!(self.backend, b => Fleet::invalidations(b)) {
            Invalidations::Local => Arc::new(ReplayCache::new(budget, true)),
            Invalidations::Feed(start) => {
                let cache = Arc::new(ReplayCache::new(budget, false));
                start(self.invalidation_channel(), Arc::clone(&cache));
                cache
            }
            Invalidations::Unsupported => return self,
        };
        self.metrics.cache_live.set(i64::from(cache.is_live()));
        self.cache = Some(cache);
        self
    }

    /// The replay cache, for its gauges and tests.
    pub fn replay_cache(&self) -> Option<&Arc<ReplayCache>> {
        self.cache.as_ref()
    }

    /// Where instances tell each other of forgotten and redelivered keys.
    pub(super) fn invalidation_channel(&self) -> String {
        format!("{}replay-cache", self.key_prefix)
    }

    /// `key` changed in the store: empty the cache here and tell the other
    /// instances. Called after the change, so no instance can read the old
    /// record back into its cache once the message has reached it.
    pub(super) async fn invalidate(&self, key: &StoreKey) {
        let Some(cache) = &self.cache else {
            return;
        };
        cache.clear();
        let channel = self.invalidation_channel();
        let told = self
            .deadline("publish", async {
                on!(self.backend, b => Fleet::publish(b, &channel, key.as_str()).await)
            })
            .await;
        if let Err(error) = told {
            // The others hold at most MAX_ENTRY_AGE of a stale "done".
            tracing::warn!(%key, %error, "could not tell the other instances to drop a cached record");
        }
    }

    /// The same store with each scope spread over `count` shards, where
    /// the backend can ([`Backend::SHARDABLE`]; elsewhere a scope stays one
    /// namespace). For tests and benchmarks: a gateway's store takes the
    /// layout it records (`learn_layout`), which a Redis Cluster also needs
    /// to check replay guards in their own slots.
    pub fn with_shards(mut self, count: u16) -> Store {
        if self.shardable {
            self.shards = Shards::new(count);
        }
        self
    }

    /// Learn the layout of this store's scopes (`Fleet::layout`): the
    /// shards it was first given, or `wanted` for a new one. Before the
    /// store serves: every key is named by it.
    pub async fn learn_layout(
        &mut self,
        scopes: &[String],
        wanted: u16,
    ) -> Result<u16, StoreError> {
        // Once per store, it may scan one master per scope: not bound by
        // the per-operation deadline.
        let op = async {
            on!(self.backend, b => Fleet::layout(b, &self.key_prefix, scopes, wanted).await)
        };
        let count = tokio::time::timeout(LAYOUT_TIMEOUT, op)
            .await
            .map_err(|_| StoreError::Timeout)??;
        if self.shardable {
            self.shards = Shards::new(count);
        }
        Ok(self.shards.count())
    }

    /// How many shards each scope has.
    pub fn shards(&self) -> u16 {
        self.shards.count()
    }

    /// The same store with each operation bounded by `timeout` instead.
    pub fn with_timeout(mut self, timeout: Duration) -> Store {
        self.timeout = timeout;
        self
    }

    /// The bound on each operation (`store.timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn backend_name(&self) -> &'static str {
        self.name
    }

    /// The store key of `key` in `scope`: `{namespace}:{key}`, where the
    /// namespace is the backend's for the key's shard (`{key_prefix}{scope}`,
    /// or on a Redis Cluster `{key_prefix}{{scope.N}}`, so that a record and
    /// its indexes live in one slot; see docs/operations/README.md).
    pub fn key(&self, scope: &str, key: &str) -> StoreKey {
        StoreKey::event(&self.source(scope, self.shards.of(key)), key)
    }

    /// The replay guard of a verified body in `scope`, in the body's shard:
    /// `{key_prefix}{scope}#body-sha256:{hex}`.
    pub fn guard_key(&self, scope: &str, body_sha256: &str) -> StoreKey {
        let source = self.source(scope, self.shards.of(body_sha256));
        StoreKey::guard(&source, body_sha256)
    }

    pub(super) fn source(&self, scope: &str, shard: Option<u16>) -> String {
        (self.namespace)(&self.key_prefix, scope, shard)
    }

    /// The namespace of each of `scope`'s shards.
    pub(super) fn sources(&self, scope: &str) -> Vec<String> {
        (self.shards.all())
            .map(|shard| self.source(scope, shard))
            .collect()
    }

    pub(super) fn deadline<'a, T>(
        &'a self,
        name: &'static str,
        op: impl Future<Output = Result<T, StoreError>> + 'a,
    ) -> impl Future<Output = Result<T, StoreError>> + 'a {
        self.deadline_at(name, "", op)
    }

    /// [`Store::deadline`] of an operation on `source`, whose refusals
    /// (errors of a store that answers) are kept until it succeeds there.
    ///
    /// The operation is boxed when this is called, not when the answer is
    /// first polled: its future is as large as the largest backend's (up to
    /// 7 KiB), and held unboxed it would be part of the future of every
    /// caller up to the request's own task, copied whole each time one is
    /// moved (BENCHMARKS.md, "Where the targets stand, and why").
    pub(super) fn deadline_at<'a, T>(
        &'a self,
        name: &'static str,
        source: &'a str,
        op: impl Future<Output = Result<T, StoreError>> + 'a,
    ) -> impl Future<Output = Result<T, StoreError>> + 'a {
        let op = Box::pin(op);
        async move {
            let started = Instant::now();
            let result = tokio::time::timeout(self.timeout, op)
                .await
                .unwrap_or(Err(StoreError::Timeout));
            match &result {
                Ok(_) => self.refusals.succeeded(name, source),
                Err(StoreError::Backend(error)) => {
                    let now_ms = crate::clock::wall()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |since| since.as_millis() as u64);
                    self.refusals.refused(name, source, error, now_ms);
                }
                Err(_) => {}
            }
            self.metrics
                .observe(name, started.elapsed(), result.is_err());
            on!(self.backend, b => Health::observed(b, !matches!( result, Err(StoreError::Timeout | StoreError::Backend(_)) )));
            result
        }
    }

    /// Backend settings that would silently lose claims, as warnings.
    pub async fn risks(&self, longest_retention: Duration) -> Vec<String> {
        tokio::time::timeout(self.timeout, async {
            on!(self.backend, b => Health::risks(b, longest_retention).await)
        })
        .await
        .unwrap_or_default()
    }

    /// The completed record of `key`, when this instance's replay cache
    /// holds it: a duplicate's answer with no round trip and nothing
    /// written (the ingress answers it on the connection's own task).
    pub fn replayed(&self, key: &StoreKey) -> Option<Arc<Record>> {
        let record = self.cache.as_ref()?.get(key)?;
        self.metrics.cache_hits.inc();
        Some(record)
    }

    /// The live record of `key`, whole, and when it expires (Unix ms): see
    /// [`Transfer::export`].
    pub async fn export(&self, key: &StoreKey) -> Result<Option<(Record, u64)>, StoreError> {
        self.deadline("export", async {
            on!(self.backend, b => Transfer::export(b, key).await)
        })
        .await
    }

    /// Write a copied record as it was, unless `key` holds one as new or
    /// newer: see [`Transfer::import`].
    pub async fn import(
        &self,
        key: &StoreKey,
        record: &Record,
        expires_at_ms: u64,
        guard: Option<&StoreKey>,
    ) -> Result<bool, StoreError> {
        let op = async {
            on!(self.backend, b => Transfer::import(b, key, record, expires_at_ms, guard).await)
        };
        let written = self.deadline_at("import", key.source(), op).await?;
        if written {
            self.invalidate(key).await;
        }
        Ok(written)
    }

    /// Whether this store is the process's own (memory, embedded): its
    /// failure then makes the instance unready.
    pub fn is_local(&self) -> bool {
        on!(self.backend, b => Health::is_local(b))
    }

    /// Bytes the store keeps on this machine (the embedded file and its
    /// log), if it keeps any.
    pub fn size_bytes(&self) -> Option<u64> {
        on!(self.backend, b => Health::size_bytes(b))
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.deadline("ping", async {
            on!(self.backend, b => Health::ping(b, &self.key_prefix).await)
        })
        .await
    }
}
