//! How a Redis Cluster store's scopes are laid out over hash slots, kept
//! in the store itself: `{prefix}layout` holds the shard count the store
//! was first given, and every instance, whatever its `store.shards`, uses
//! that one. Two instances therefore never look for an event under two
//! names — the thing a rolling upgrade must never do.
//!
//! A store without that key that already holds records in the layout of
//! releases before sharding (a scope as one hash tag, `{prefix}{scope}`)
//! keeps that layout: it is recorded as one shard. Moving such a store to
//! the sharded layout is `hookgate store copy` to a new `key_prefix`
//! (docs/operations/stores.md, "Sharding an existing cluster store"). A new,
//! empty store takes `store.shards`.

use std::sync::atomic::Ordering;

use redis::{Script, Value};

use super::fields::bytes;
use super::{backend, Connector, RedisStore};
use crate::store::{Backend, StoreError};

/// KEYS[1] `{prefix}layout`; ARGV the shard count to record where none
/// is. Returns the recorded count.
const LEARN: &str = "
local n = redis.call('GET', KEYS[1])
if n then return tonumber(n) end
redis.call('SET', KEYS[1], ARGV[1])
return tonumber(ARGV[1])
";

/// The indexes a scope's records keep while any exist (`scripts.rs`).
const INDEXES: [&str; 7] = [
    "completed",
    "processing",
    "failed",
    "dead",
    "queued",
    "due",
    "accepted",
];

impl RedisStore<super::Cluster> {
    /// Check every replay guard in the steps of a sharded layout
    /// (`guard.rs`) whatever the layout: for the conformance suite, which
    /// names its keys in one hash tag and still runs the guard's steps.
    pub fn guard_in_steps(self) -> Self {
        self.sharded.store(true, Ordering::Relaxed);
        self
    }
}

impl<C: Connector> RedisStore<C> {
    pub(super) async fn learn_layout(
        &self,
        space: &str,
        scopes: &[String],
        wanted: u16,
    ) -> Result<u16, StoreError> {
        if !C::HASH_TAGS {
            // One Redis: every script reaches every key; one layout.
            return Ok(1);
        }
        let layout = format!("{space}layout");
        let mut connection = self.connector.connection().await?;
        let recorded: Option<u16> = redis::cmd("GET")
            .arg(&layout)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        let count = match recorded {
            Some(count) => count,
            None => {
                let unsharded = self.unsharded_records(space, scopes).await?;
                let first = if unsharded { 1 } else { wanted.max(1) };
                Script::new(LEARN)
                    .key(&layout)
                    .arg(first)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(backend)?
            }
        };
        if count != wanted {
            tracing::warn!(
                recorded = count,
                configured = wanted,
                "this Redis Cluster store is laid out in {count} shard(s) per scope and keeps that \
                 layout; store.shards = {wanted} applies to a new key_prefix (see \
                 docs/operations/stores.md, \"Sharding an existing cluster store\")"
            );
        }
        self.sharded.store(count > 1, Ordering::Relaxed);
        Ok(count)
    }

    /// Whether any configured scope holds records in the unsharded layout:
    /// one of its indexes, or — for releases before the indexes — one of
    /// its records, found by `SCAN` on the master of the scope's one slot
    /// (once per store, the first time this release meets it).
    async fn unsharded_records(&self, space: &str, scopes: &[String]) -> Result<bool, StoreError> {
        let mut connection = self.connector.connection().await?;
        for scope in scopes {
            let source = Self::namespace(space, scope, None);
            for index in INDEXES {
                let found: i64 = redis::cmd("EXISTS")
                    .arg(format!("{source}!{index}"))
                    .query_async(&mut connection)
                    .await
                    .map_err(backend)?;
                if found == 1 {
                    return Ok(true);
                }
            }
        }
        let mut acked = self.connector.acked().await?;
        for scope in scopes {
            let source = Self::namespace(space, scope, None);
            let pattern = format!("{}:*", glob_literal(&source));
            let mut cursor = "0".to_owned();
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(&cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000);
                let reply = C::send_to_master_of(&mut acked, &source, scan)
                    .await
                    .map_err(backend)?;
                let Value::Array(parts) = reply else {
                    return Err(StoreError::Corrupt(format!(
                        "unexpected SCAN reply {reply:?}"
                    )));
                };
                match parts.as_slice() {
                    [_, Value::Array(keys)] if !keys.is_empty() => return Ok(true),
                    [next, _] => cursor = String::from_utf8_lossy(&bytes(next)).into_owned(),
                    _ => return Err(StoreError::Corrupt("unexpected SCAN reply".into())),
                }
                if cursor == "0" {
                    break;
                }
            }
        }
        Ok(false)
    }
}

/// `text` matched literally in a `SCAN MATCH` pattern.
fn glob_literal(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}
