//! The claim store: one record per scoped idempotency key, shared by every
//! gateway instance that uses the same backend.
//!
//! A record moves `Processing` → `Completed`, or `Processing` → `Failed` →
//! `Processing` again when the upstream failed and the sender retries, and
//! → `Dead` after `max_attempts`; an accepted one is `Queued` between its
//! attempts (docs/guide/dead-letters.md, "Failed events and dead letters" and "Asynchronous
//! delivery"; the record's life across entrances is [`decide`] in
//! `record.rs`). The contract is [`Backend`], made of capabilities a
//! backend implements together — [`Records`] (claims), [`Queue`] (leases
//! of due accepted events, on the same records), [`Listing`], [`Fleet`]
//! (route controls, the replay cache's feed) and [`Health`]; every backend
//! holds the invariants, and `tests/it/conformance/` (one file per capability;
//! `life.rs` the record's life) run the same suites against each:
//!
//! - `claim` is atomic: of any number of concurrent claims of a key, exactly
//!   one gets [`ClaimOutcome::New`] with a fresh random fencing token.
//! - A `Processing` record whose lease expired (its holder died) is claimable
//!   again; the attempt count goes up by one.
//! - `renew`, `complete` and `release` compare the fencing token, so a holder
//!   whose lease expired and was taken over can never overwrite or delete its
//!   successor's claim. They answer `false` when the token no longer matches.
//! - A completed record, with the recorded response, lives for `retention`;
//!   a failed or dead one keeps the request and its last error for
//!   `dead_letter_retention`. A dead record answers deliveries `Dead` and is
//!   claimed only by an operator's redelivery ([`ClaimMode`]), a completed
//!   one only by a forced redelivery; a live lease is never taken.
//! - Listings page through one source's records of one state, newest first
//!   by last change, without scanning the keyspace.
//! - With a replay guard, a claimable key (new, released, or with a lapsed
//!   lease) whose body already claimed another key is answered by that key's
//!   record while it is completed or in flight (see
//!   [`ClaimRequest::guard_key`]).
//!
//! [`Store`] wraps whichever backend is configured: it owns the key layout
//! (prefix, scope and hash tags), bounds every operation by the store
//! `timeout` (a slow store is an unavailable store, [`StoreError::Timeout`])
//! and times and counts it. A caller reaches the operations by the
//! capability it uses (`roles/`): `store.records()`, `store.queue()`,
//! `store.listing()`, `store.fleet()`. Adding a backend is its folder implementing
//! the capabilities, one variant of [`Backends`] (and its arm in `on!`),
//! one settings variant opened in [`Store::open`], and its name in the
//! tests' one list of backends (`tests/it/support/stores.rs`). [`backend`] holds the traits, `backends` the enum
//! [`Store`] keeps a backend in, [`listing`] the pages listings return.

mod backend;
mod backends;
mod cache;
mod copy;
mod embedded;
mod facade;
pub mod history;
#[cfg(test)]
mod late;
mod listing;
mod memory;
mod migrate;
mod order;
mod postgres;
mod record;
mod redis;
mod reencrypt;
mod refusals;
mod roles;
pub mod sealed;
mod settings;
mod shards;

pub use self::backend::{Backend, Fleet, Health, Listing, Queue, Records, Transfer};
pub use self::backends::Backends;
pub use self::cache::{follow, Invalidations, ReplayCache};
pub use self::copy::{
    copy, Copied as CopiedRecords, CopyScope, Counts as CopyCounts, COPY_TIMEOUT,
};
pub use self::embedded::{
    backup, checkpoint, upgrade as upgrade_embedded, Copied, EmbeddedStore, Upgraded,
};
pub use self::facade::{ForceRelease, Store};
pub use self::history::{AttemptKind, FailureClass, LastError, PastAttempt};
pub use self::listing::{Cursor, Listed, Page};
pub use self::memory::MemoryStore;
pub use self::migrate::migrate;
pub use self::order::{Blocked, OrderSpot, Ordered};
pub use self::postgres::{
    check_url as check_postgres_url, grants as postgres_grants, migration_script,
    pending_migrations, PostgresStore, CONNECTIONS_BESIDE_POOL as POSTGRES_CONNECTIONS_BESIDE_POOL,
    MIGRATIONS,
};
pub(crate) use self::record::{decide, keeps_without_force, new_token, settled, Decision};
pub use self::record::{
    ClaimMode, ClaimOutcome, ClaimRequest, Deleted, Due, Failure, Lease, Leased, ListQuery, Next,
    Queued, Record, RecordState, StoreKey, Stored, StoredRequest, SyncNext,
};
pub use self::redis::{
    check_sentinels, check_url as check_redis_url, Cluster, RedisStore, Sentinel, Single,
};
pub use self::reencrypt::{reencrypt, Content, Resealed};
pub use self::refusals::Refused;
pub use self::settings::{
    BackendSettings, BackupSettings, StoreSettings, Synchronous, DEFAULT_CLUSTER_SHARDS,
    DEFAULT_REPLAY_CACHE_BYTES,
};
pub use crate::clock::Clock;
// What records hold and how queues lease, as the store's callers name them.
pub use crate::order::Rules;
pub use crate::replay::{BodyKept, RecordedResponse};
pub use crate::seal::Keys;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("store operation timed out")]
    Timeout,
    #[error("store backend error: {0}")]
    Backend(String),
    #[error("store holds a record hookgate cannot read: {0}")]
    Corrupt(String),
    /// The store is laid out in a way the config cannot run on.
    #[error("{0}")]
    Layout(String),
    /// A record sealed under a key no configured key opens, or changed
    /// (docs/guide/stores.md, "Data at rest"): never answered as anything but this.
    #[error("the record cannot be opened: {0}")]
    Unreadable(String),
}
