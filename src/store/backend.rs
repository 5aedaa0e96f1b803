//! The contract every store backend implements (see the store module's doc
//! for its invariants), and the defaults of what a backend may not need.

use std::future::Future;
use std::time::Duration;

use super::{
    Blocked, ClaimOutcome, ClaimRequest, Deleted, Due, Failure, Invalidations, Leased, ListQuery,
    Queued, Record, RecordState, StoreError, StoreKey,
};
use crate::order::Rules;
use crate::replay::RecordedResponse;

/// A store backend: every capability, implemented together (see the store
/// module's doc for the invariants, and `tests/it/conformance/` for the
/// suite each runs). Keys arrive fully laid out by
/// [`Store::key`](super::Store::key).
pub trait Backend: Queue + Listing + Fleet + Health + Transfer {
    /// The `backend` name in `[store]`.
    const NAME: &'static str;

    /// Whether a scope may spread over shards (`Store::with_shards`): a
    /// backend whose claim finds a replay guard by its full name, in any
    /// namespace. PostgreSQL keeps a guard beside its key's source and a
    /// scope in one table and its indexes, with nothing to spread.
    const SHARDABLE: bool = true;

    /// The namespace of `scope`'s keys under `key_prefix` (of one of its
    /// shards, when the store spreads a scope over several): every key of a
    /// scope's shard starts with it. `{key_prefix}{scope}` by default, and
    /// `{key_prefix}{scope}.{shard}` for a shard; a Redis Cluster makes the
    /// scope (and shard) a hash tag, `{key_prefix}{{scope.shard}}`, so that
    /// the keys one script touches together (a record and its indexes)
    /// share a slot.
    fn namespace(key_prefix: &str, scope: &str, shard: Option<u16>) -> String {
        match shard {
            None => [key_prefix, scope].concat(),
            Some(shard) => format!("{key_prefix}{scope}.{shard}"),
        }
    }
}

/// Records: one per scoped key, claimed atomically under a fencing token,
/// renewed, completed, failed by the record's duty, released, read and
/// forgotten.
pub trait Records: Send + Sync + 'static {
    /// Claim `request.key` with fencing token `token` (chosen by [`Store`](super::Store),
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

    /// Record a failed attempt of the holder of `token`, by the record's
    /// duty: an accepted record is queued again (due after
    /// `failure.next.queued`) or dead, any other turns failed (the token
    /// and lease kept when held) or dead. Either keeps the request and the
    /// error, and lives for `failure.retention`. Returns the state left, or
    /// `None` when the token no longer holds the record.
    fn fail(
        &self,
        key: &StoreKey,
        token: &str,
        failure: &Failure<'_>,
    ) -> impl Future<Output = Result<Option<RecordState>, StoreError>> + Send;

    /// Give the key up so the next delivery claims it (the record turns
    /// `Failed`, or `Queued` and due now for an async event); the attempt
    /// count stays.
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
}

/// Moving records from one store to another (`hookgate store copy`,
/// docs/operations/README.md "Moving between stores"): a record read with when it
/// expires, and written back with its indexes as it was.
pub trait Transfer: Records {
    /// The live record of `key`, whole, and when it expires (Unix ms).
    fn export(
        &self,
        key: &StoreKey,
    ) -> impl Future<Output = Result<Option<(Record, u64)>, StoreError>> + Send;

    /// Write `record` under `key` as it is — state, token and lease, times,
    /// response, request, history — to expire at `expires_at_ms`, with its
    /// listing entry and, for an accepted event, its place in the queue;
    /// with `guard`, the replay guard of its body points at `key` unless it
    /// points at a live record already. Nothing is written when the key
    /// holds a live record changed at or after `record.updated_ms` (newer,
    /// or this same record copied before), or `expires_at_ms` has passed.
    /// Returns whether the record was written.
    fn import(
        &self,
        key: &StoreKey,
        record: &Record,
        expires_at_ms: u64,
        guard: Option<&StoreKey>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Write `now`'s kept content (`hookgate store reencrypt`: the request,
    /// the answer and the history, laid out as [`Content`](super::Content))
    /// in place of `was`'s, only while the live record of `key` still keeps
    /// exactly `was`'s, compared column by column in one atomic step. Nothing else
    /// of the record changes. A record some delivery wrote since it was read
    /// is left alone (`false`), so a rewrite never undoes a write.
    fn reseal(
        &self,
        key: &StoreKey,
        was: &Record,
        now: &Record,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// The queue of accepted events. On the same backend as [`Records`]: one
/// atomic step changes a record and its due entry together.
pub trait Queue: Records {
    /// Lease up to `tokens.len()` async events of `source` that are due —
    /// queued with their next attempt at hand, or held by a worker whose
    /// lease lapsed — one token each, for `processing_ttl`; the attempt
    /// count goes up by one. Atomic per event: of concurrent workers, one
    /// gets each event.
    fn lease_due(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
    ) -> impl Future<Output = Result<Vec<Due>, StoreError>> + Send;

    /// Whether the backend keeps an entity's order ([`Queue::lease_ordered`]).
    const ORDERED: bool = false;

    /// As [`Queue::lease_due`], keeping each entity's order (docs/guide/ordering.md,
    /// "Ordered delivery"): of an entity's pending events — accepted with
    /// an [`OrderSpot`](super::OrderSpot), not yet completed, stale or
    /// forgotten, and dead ones while `rules` say they hold it — only the
    /// first in [`Ordered`](super::Ordered) order is leased, once it is
    /// due, and only while no other event of the entity is in flight. A
    /// head whose `stale_by` value is below the newest one completed for
    /// its entity turns `Stale` instead (an equal value is not stale), and
    /// the next one is considered. Unordered events are leased as
    /// `lease_due` leases them.
    fn lease_ordered(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> impl Future<Output = Result<Leased, StoreError>> + Send {
        let _ = (source, tokens, processing_ttl, rules);
        async { Err(StoreError::Backend("this store keeps no order".into())) }
    }
}

/// Listings for operators and gauges, served by indexes (never a scan of
/// the keyspace).
pub trait Listing: Send + Sync + 'static {
    /// One page of `query`: `(id, record)` pairs, newest first, records as
    /// [`Record::summary`] shows them.
    fn list(
        &self,
        query: &ListQuery<'_>,
    ) -> impl Future<Output = Result<Vec<(String, Record)>, StoreError>> + Send;

    /// How many live records of `source` are in `state`.
    fn count(
        &self,
        source: &str,
        state: RecordState,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// What `source` holds queued, for the queue bounds: its events
    /// waiting for their delivery and the bytes the store keeps for them —
    /// each backend says how it counts them (docs/operations/deploying.md,
    /// "Sizing"). By default the events only.
    fn queued(&self, source: &str) -> impl Future<Output = Result<Queued, StoreError>> + Send {
        async move {
            let events = self.count(source, RecordState::Queued).await?;
            Ok(Queued { events, bytes: 0 })
        }
    }

    /// When the longest-waiting live record of `source` in `state` last
    /// changed (Unix ms), if any; for `queued`, when the oldest event
    /// waiting for its delivery (queued, or being tried again after a
    /// failure) was first seen — its acceptance, which no failed attempt
    /// moves: for `hookgate_oldest_queued_seconds`.
    fn oldest(
        &self,
        source: &str,
        state: RecordState,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send;

    /// The entities of `source` held by a dead event — their first
    /// pending event is dead — oldest death first, at most `limit`: for
    /// routes with `on_blocked = "wait"` (docs/guide/ordering.md, "Ordered delivery"). Of
    /// a route that skips dead events, dead ones may still be reported
    /// until a lease passes them by; it is not asked.
    fn blocked(
        &self,
        source: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Blocked>, StoreError>> + Send;

    /// Drop listing entries of `source` in `state` last changed before
    /// `before_ms` (Unix ms): their records have expired. For backends that
    /// keep listing indexes beside their records (Redis); the others list
    /// from the records themselves and have nothing to do.
    fn trim(
        &self,
        source: &str,
        state: RecordState,
        before_ms: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let _ = (source, state, before_ms);
        async { Ok(0) }
    }
}

/// What instances of a fleet share beyond records: route controls (pauses)
/// and the replay cache's invalidation feed.
pub trait Fleet: Send + Sync + 'static {
    /// Set (`Some`) or clear (`None`) the control `value` of `route` in
    /// `space` (the key prefix): a route's pause, kept fleet-wide (docs/guide/traffic-control.md, "Traffic control").
    /// The value is opaque text to the backend.
    fn set_control(
        &self,
        space: &str,
        route: &str,
        value: Option<&str>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every route control set in `space`: `(route, value)` pairs.
    fn controls(
        &self,
        space: &str,
    ) -> impl Future<Output = Result<Vec<(String, String)>, StoreError>> + Send;

    /// How a change made by another instance reaches this one's replay
    /// cache (see `cache.rs`); without a way, the cache stays off.
    fn invalidations(&self) -> Invalidations {
        Invalidations::Unsupported
    }

    /// Tell every instance that `key` changed, on `channel` (Redis: a
    /// `PUBLISH`); nothing where this process is the only writer.
    fn publish(
        &self,
        channel: &str,
        key: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (channel, key);
        async { Ok(()) }
    }

    /// How many shards each scope of `space` (the key prefix) is laid out
    /// in, learned once before an instance serves: `wanted` (`store.shards`)
    /// where the store can shard and holds no layout yet. A store keeps the
    /// layout it was first given, so two instances never look for an event
    /// under two names (Redis Cluster: `layout.rs`). `scopes` are the
    /// configured ones, where records of an earlier layout would be.
    fn layout(
        &self,
        space: &str,
        scopes: &[String],
        wanted: u16,
    ) -> impl Future<Output = Result<u16, StoreError>> + Send {
        let _ = (space, scopes);
        async move { Ok(wanted) }
    }
}

/// Whether the backend serves, and settings that would lose claims.
pub trait Health: Send + Sync + 'static {
    /// Whether the store answers, and would let a delivery do its work:
    /// the permissions deliveries use under `space` (the key prefix), not
    /// just a connection.
    fn ping(&self, space: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether the store is this process's own (memory, the embedded
    /// file): then its failure is this instance's, and makes it unready. A
    /// shared store's outage is every replica's at once, so it never does
    /// (docs/guide/observability.md, "Observability": readiness is local).
    fn is_local(&self) -> bool {
        false
    }

    /// How an operation went: answered, or failed with the store's error or
    /// its deadline. A client that can wedge uses it to replace its
    /// connection (Redis Cluster: `redis/repair.rs`).
    fn observed(&self, answered: bool) {
        let _ = answered;
    }

    /// The bytes the store keeps on this machine's disk (the embedded file
    /// and its write-ahead log), for `hookgate_store_bytes`; `None` for a
    /// store elsewhere.
    fn size_bytes(&self) -> Option<u64> {
        None
    }

    /// Settings of the backend that would silently lose claims (Redis
    /// eviction, no persistence), as operator warnings; empty when fine or
    /// unknown.
    fn risks(&self, longest_retention: Duration) -> impl Future<Output = Vec<String>> + Send {
        let _ = longest_retention;
        async { Vec::new() }
    }
}
