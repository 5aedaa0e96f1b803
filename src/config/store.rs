//! `[store]`: which backend and how to reach it, plus the two settings of
//! how the pipeline uses it (`key_prefix`, fixed; `on_error`, live).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::locate::KeyPath;
use super::raw::{RawBackup, RawEncryption, RawStore};
use super::settings::{Backend, OnStoreError, StoreSettings, Synchronous};
use super::validate::Validator;
use crate::seal::Keys;
use crate::store::{BackupSettings, DEFAULT_CLUSTER_SHARDS, DEFAULT_REPLAY_CACHE_BYTES};

/// Connections per gateway to a PostgreSQL store.
const DEFAULT_POOL_SIZE: u64 = 16;

/// What a PostgreSQL server accepts out of the box: `max_connections` 100,
/// 3 of them reserved for superusers.
const POSTGRES_DEFAULT_CONNECTIONS: usize = 97;

impl Validator<'_> {
    /// The connection settings, the key prefix, `on_error` and
    /// `max_queued_bytes`.
    pub(super) fn store(
        &mut self,
        at: &KeyPath,
        raw: RawStore,
    ) -> (StoreSettings, String, OnStoreError, u64) {
        let backend_name = match &raw.backend {
            Some(name) => self.string(&at.key("backend"), name).unwrap_or_default(),
            None => "embedded".to_owned(),
        };
        let backend = self.backend(at, &raw, &backend_name);
        self.keys_of_backend(at, &raw, &backend_name);
        let key_prefix = match &raw.key_prefix {
            Some(prefix) => self
                .string(&at.key("key_prefix"), prefix)
                .unwrap_or_default(),
            None => "hookgate:".to_owned(),
        };
        let on_error = self.choice(
            &at.key("on_error"),
            raw.on_error.as_ref(),
            &[
                ("reject", OnStoreError::Reject),
                ("forward", OnStoreError::Forward),
            ],
            OnStoreError::Reject,
        );
        let settings = StoreSettings {
            backend,
            timeout: self.duration(
                &at.key("timeout"),
                raw.timeout.as_ref(),
                Duration::from_millis(500),
            ),
            min_replicas_acked: raw.min_replicas_acked.unwrap_or(0),
            packed_claims: raw.packed_claims.unwrap_or(true),
            packed_completions: raw.packed_completions.unwrap_or(true),
            tls_ca: raw.tls_ca.as_ref().and_then(|path| {
                let path = PathBuf::from(self.string(&at.key("tls_ca"), path)?);
                if let Err(message) = crate::tls::load_certs(&path) {
                    self.fail(&at.key("tls_ca"), message);
                }
                Some(path)
            }),
            backup: (raw.backup.as_ref()).and_then(|backup| {
                let at = at.key("backup");
                if backend_name != "embedded" {
                    self.fail(&at, "only for the embedded store: back Redis and PostgreSQL up with their own tools (docs/operations/stores.md, \"Backups\")");
                    return None;
                }
                self.backup(&at, backup)
            }),
            replay_cache_bytes: match raw.replay_cache_bytes {
                None => DEFAULT_REPLAY_CACHE_BYTES,
                Some(bytes) if bytes <= 4 << 30 => bytes as usize,
                Some(_) => {
                    self.fail(
                        &at.key("replay_cache_bytes"),
                        "must be between 0 (off) and 4294967296",
                    );
                    DEFAULT_REPLAY_CACHE_BYTES
                }
            },
        };
        let max_queued_bytes = self.bytes(
            &at.key("max_queued_bytes"),
            raw.max_queued_bytes.as_ref(),
            0,
        );
        (settings, key_prefix, on_error, max_queued_bytes)
    }

    /// The backend `backend_name` names, and how to reach it.
    fn backend(&mut self, at: &KeyPath, raw: &RawStore, backend_name: &str) -> Backend {
        match backend_name {
            "memory" => Backend::Memory,
            "embedded" => Backend::Embedded {
                path: PathBuf::from(match &raw.path {
                    Some(path) => self.string(&at.key("path"), path).unwrap_or_default(),
                    None => "hookgate.db".to_owned(),
                }),
                synchronous: self.choice(
                    &at.key("synchronous"),
                    raw.synchronous.as_ref(),
                    &[("normal", Synchronous::Normal), ("full", Synchronous::Full)],
                    Synchronous::Normal,
                ),
            },
            "redis" => match &raw.url {
                Some(url) => {
                    let url = self.string(&at.key("url"), url).unwrap_or_default();
                    if let Err(message) = crate::store::check_redis_url(&url) {
                        self.fail(&at.key("url"), message);
                    }
                    Backend::Redis { url }
                }
                None => {
                    self.fail(
                        at,
                        "backend \"redis\" needs `url = \"redis://host:6379/0\"`",
                    );
                    Backend::Memory
                }
            },
            "postgres" => match &raw.url {
                Some(url) => {
                    let url = self.string(&at.key("url"), url).unwrap_or_default();
                    if let Err(message) = crate::store::check_postgres_url(&url) {
                        self.fail(&at.key("url"), message);
                    }
                    let pool_size =
                        self.size(&at.key("pool_size"), raw.pool_size, DEFAULT_POOL_SIZE, 1024);
                    self.warn_connections(pool_size);
                    Backend::Postgres { url, pool_size }
                }
                None => {
                    self.fail(
                        at,
                        "backend \"postgres\" needs `url = \"postgres://user@host:5432/db\"`",
                    );
                    Backend::Memory
                }
            },
            "redis-sentinel" => self.sentinel(at, raw),
            "redis-cluster" => {
                let nodes = self.redis_urls(at, "nodes", raw.nodes.as_deref());
                if raw.nodes.as_ref().is_none_or(Vec::is_empty) {
                    self.fail(
                        at,
                        "backend \"redis-cluster\" needs `nodes = [\"redis://host:7000\", ...]`",
                    );
                }
                let shards = self.size(
                    &at.key("shards"),
                    raw.shards,
                    u64::from(DEFAULT_CLUSTER_SHARDS),
                    1024,
                ) as u16;
                Backend::RedisCluster { nodes, shards }
            }
            "" => Backend::Memory,
            other => {
                self.fail(
                    &at.key("backend"),
                    format!("{other:?} is not one of \"embedded\", \"memory\", \"redis\", \"redis-cluster\", \"redis-sentinel\", \"postgres\""),
                );
                Backend::Memory
            }
        }
    }

    /// `redis-sentinel`'s sentinels, the primary's name and its `url`.
    fn sentinel(&mut self, at: &KeyPath, raw: &RawStore) -> Backend {
        let sentinels = self.redis_urls(at, "sentinels", raw.sentinels.as_deref());
        if raw.sentinels.as_ref().is_none_or(Vec::is_empty) {
            self.fail(
                at,
                "backend \"redis-sentinel\" needs `sentinels = [\"redis://host:26379\", ...]`",
            );
        }
        let master = match &raw.master {
            Some(name) => self.string(&at.key("master"), name).unwrap_or_default(),
            None => {
                self.fail(
                    at,
                    "backend \"redis-sentinel\" needs `master = \"mymaster\"`, the name the sentinels monitor the primary under",
                );
                String::new()
            }
        };
        let url = raw
            .url
            .as_ref()
            .and_then(|url| self.string(&at.key("url"), url));
        if let Err(message) = crate::store::check_sentinels(&sentinels, url.as_deref()) {
            self.fail(&at.key("sentinels"), message);
        }
        Backend::RedisSentinel {
            sentinels,
            master,
            url,
        }
    }

    /// A key of `[store]` another backend's is refused, not ignored.
    fn keys_of_backend(&mut self, at: &KeyPath, raw: &RawStore, backend_name: &str) {
        let applies = |key: &str| match key {
            "path" | "synchronous" => backend_name == "embedded",
            "url" => matches!(backend_name, "redis" | "redis-sentinel" | "postgres"),
            "sentinels" | "master" => backend_name == "redis-sentinel",
            "pool_size" => backend_name == "postgres",
            "min_replicas_acked" | "packed_claims" | "packed_completions" => {
                backend_name.starts_with("redis")
            }
            "tls_ca" => backend_name.starts_with("redis") || backend_name == "postgres",
            _ => backend_name == "redis-cluster",
        };
        for (name, present) in [
            ("path", raw.path.is_some()),
            ("synchronous", raw.synchronous.is_some()),
            ("url", raw.url.is_some()),
            ("pool_size", raw.pool_size.is_some()),
            ("nodes", raw.nodes.is_some()),
            ("sentinels", raw.sentinels.is_some()),
            ("master", raw.master.is_some()),
            ("shards", raw.shards.is_some()),
            ("min_replicas_acked", raw.min_replicas_acked.is_some()),
            ("packed_claims", raw.packed_claims.is_some()),
            ("packed_completions", raw.packed_completions.is_some()),
            ("tls_ca", raw.tls_ca.is_some()),
        ] {
            if present && !applies(name) {
                self.fail(
                    &at.key(name),
                    format!("`{name}` does not apply to backend {backend_name:?}"),
                );
            }
        }
    }

    /// `[store.encryption]`: its keys, each read (usually through
    /// `${file:…}`) and checked; an error names a key by its place only.
    pub(super) fn encryption(&mut self, at: &KeyPath, raw: RawEncryption) -> Option<Arc<Keys>> {
        let Some(texts) = raw.keys else {
            self.fail(at, "needs `keys = [\"${file:/run/secrets/hookgate-key}\"]`: 32-byte keys, hex or base64, the first encrypts");
            return None;
        };
        let texts: Vec<String> = (texts.iter().enumerate())
            .map(|(i, text)| self.string(&at.key("keys").index(i), text))
            .collect::<Option<_>>()?;
        match Keys::parse(&texts) {
            Ok(keys) => Some(Arc::new(keys)),
            Err(message) => {
                self.fail(&at.key("keys"), message);
                None
            }
        }
    }

    /// `[store.backup]`: how often, where, how many.
    fn backup(&mut self, at: &KeyPath, raw: &RawBackup) -> Option<BackupSettings> {
        let Some(every) = &raw.every else {
            self.fail(at, "needs `every = \"1h\"`: how often a backup is taken");
            return None;
        };
        let every = self.duration(&at.key("every"), Some(every), Duration::from_secs(3600));
        if every < Duration::from_secs(1) {
            self.fail(&at.key("every"), "must be at least 1s");
        }
        let Some(dir) = &raw.dir else {
            self.fail(
                at,
                "needs `dir = \"/var/lib/hookgate/backups\"`: where the copies go",
            );
            return None;
        };
        let dir = PathBuf::from(self.string(&at.key("dir"), dir)?);
        let keep = self.size(&at.key("keep"), raw.keep, 24, 10_000);
        Some(BackupSettings { every, dir, keep })
    }

    /// A list of Redis URLs (`nodes`, `sentinels`), each one checked.
    fn redis_urls(&mut self, at: &KeyPath, key: &str, urls: Option<&[String]>) -> Vec<String> {
        (urls.iter().copied().flatten().enumerate())
            .filter_map(|(i, url)| {
                let url = self.string(&at.key(key).index(i), url)?;
                if let Err(message) = crate::store::check_redis_url(&url) {
                    self.fail(&at.key(key).index(i), message);
                }
                Some(url)
            })
            .collect()
    }

    /// A pool whose fleet obviously exceeds a default PostgreSQL server:
    /// two gateways (a fleet's least) over its 97 connections.
    fn warn_connections(&mut self, pool_size: usize) {
        let each = pool_size + crate::store::POSTGRES_CONNECTIONS_BESIDE_POOL;
        if 2 * each > POSTGRES_DEFAULT_CONNECTIONS {
            self.warn(format!(
                "store.pool_size = {pool_size}: each gateway opens {each} connections ({pool_size} \
                 + 2 for listings + 1 for the replay cache's LISTEN), so two gateways open {} — \
                 more than a default PostgreSQL server accepts (max_connections 100, 3 reserved); \
                 raise max_connections or lower pool_size (docs/operations/stores.md, \"PostgreSQL\")",
                2 * each
            ));
        }
    }
}
