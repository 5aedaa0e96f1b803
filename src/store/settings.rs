//! How to reach a store: the `[store]` connection settings, validated by
//! `config` and read by the backends. They live here, with the store, so
//! the store never depends on the config module.

use std::path::PathBuf;
use std::time::Duration;

/// How to reach the store: everything a benchmark or a test needs to open
/// one, and nothing about how the pipeline uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreSettings {
    pub backend: BackendSettings,
    /// Deadline for each store operation.
    pub timeout: Duration,
    /// redis, redis-sentinel, redis-cluster: replicas that must acknowledge a claim (`WAIT`).
    pub min_replicas_acked: u32,
    /// redis, redis-sentinel, redis-cluster: extra CA (PEM) for `rediss://` servers.
    pub tls_ca: Option<PathBuf>,
    /// redis, redis-sentinel, redis-cluster: claim new sync keys with one `SET … NX GET PX`
    /// (`store/redis/packed.rs`); on unless the config turns it off.
    pub packed_claims: bool,
    /// redis, redis-sentinel, redis-cluster: a packed claim's completion
    /// written as one string (`SET … PX`) instead of a hash
    /// (`store/redis/packed.rs`); on unless the config turns it off.
    pub packed_completions: bool,
    /// The replay cache's budget in bytes (0: off).
    pub replay_cache_bytes: usize,
    /// embedded: `[store.backup]`, the gateway's own scheduled backups.
    pub backup: Option<BackupSettings>,
}

/// `[store.backup]`: an online backup of the embedded file every `every`
/// into `dir`, the newest `keep` kept (`backups.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct BackupSettings {
    pub every: Duration,
    pub dir: PathBuf,
    pub keep: usize,
}

/// Default `replay_cache_bytes`.
pub const DEFAULT_REPLAY_CACHE_BYTES: usize = 32 << 20;

impl StoreSettings {
    /// Defaults for `backend`, as a config without those keys gets them.
    pub fn new(backend: BackendSettings) -> Self {
        Self {
            backend,
            timeout: Duration::from_millis(500),
            min_replicas_acked: 0,
            tls_ca: None,
            packed_claims: true,
            packed_completions: true,
            replay_cache_bytes: DEFAULT_REPLAY_CACHE_BYTES,
            backup: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSettings {
    Memory,
    /// One SQLite file, one gateway instance.
    Embedded {
        path: PathBuf,
        synchronous: Synchronous,
    },
    Redis {
        url: String,
    },
    /// A Redis primary with replicas under Sentinel: the sentinels to ask,
    /// the name they monitor the primary under, and how to talk to whichever
    /// server they name (`url`: scheme, user, password and database; its host
    /// is ignored).
    RedisSentinel {
        sentinels: Vec<String>,
        master: String,
        url: Option<String>,
    },
    /// Seed nodes of a Redis Cluster, and the hash slots each scope is
    /// spread over (`store.shards`) in a new store.
    RedisCluster {
        nodes: Vec<String>,
        shards: u16,
    },
    /// A PostgreSQL database shared by every gateway of a fleet.
    Postgres {
        url: String,
        pool_size: usize,
    },
}

/// Default `store.shards` of a Redis Cluster store: more slots per scope
/// than any realistic cluster has masters, so a busy route's load spreads
/// over all of them within a few percent.
pub const DEFAULT_CLUSTER_SHARDS: u16 = 64;

impl BackendSettings {
    /// The shards per scope a new store of this backend is laid out in.
    pub fn shards(&self) -> u16 {
        match self {
            BackendSettings::RedisCluster { shards, .. } => *shards,
            _ => 1,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            BackendSettings::Memory => "memory",
            BackendSettings::Embedded { .. } => "embedded",
            BackendSettings::Redis { .. } => "redis",
            BackendSettings::RedisSentinel { .. } => "redis-sentinel",
            BackendSettings::RedisCluster { .. } => "redis-cluster",
            BackendSettings::Postgres { .. } => "postgres",
        }
    }
}

/// How hard the embedded store pushes each commit to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// Survives a crash of hookgate; may lose the last commits on power loss.
    Normal,
    /// Also survives power loss, at one fsync per commit batch.
    Full,
}
