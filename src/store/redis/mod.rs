//! Redis backend: one hash per key, every state change one Lua script (one
//! round trip, atomic on the server).
//!
//! The replay guard is a plain string key holding the name of the key that
//! first claimed a body.
//!
//! Fields: `state`, `token`, `body_sha256`, `attempts`, `first_seen`,
//! `lease_until`, `completed_at`, `status`, `headers`, `body` — readable with
//! `redis-cli HGETALL`. The key's own TTL is the record's `retention`; the
//! lease is the `lease_until` field, judged against Redis's `TIME` so every
//! gateway instance shares one clock and a release keeps the attempt count.
//!
//! Connection, single Redis: the redis crate's `ConnectionManager` — one
//! multiplexed connection that pipelines every concurrent request (no pool
//! checkout, no per-request connection; measured 2.8× the claims/s of a bb8
//! pool, see BENCHMARKS.md) and reconnects by itself after Redis comes back.
//!
//! Connection, Redis Cluster: the crate's async cluster client — slot-aware
//! routing, MOVED/ASK handling, reconnection and topology refresh after a
//! failover. It connects on first use (so the gateway starts, answering 503,
//! while the cluster is down) and retries the connection on later requests.
//! Every script touches keys of one slot: each shard of a scope is a hash
//! tag, `{scope.N}`, holding its records and their indexes (`layout.rs`
//! keeps the store's shard count), and a replay guard in another slot than
//! its key is checked in steps of its own (`guard.rs`). A connection that
//! stops answering is replaced (`repair.rs`).
//!
//! Connection, Redis Sentinel: one Redis as above, the primary the
//! sentinels name, asked again when operations fail (`sentinel.rs`).
//!
//! Beside this file: `connect.rs` (reaching one Redis or a cluster),
//! `scripts.rs` (the Lua) after `prelude.rs` (what every script starts
//! with), `packed.rs` (the packed claim and completion), `fields.rs`
//! (reading a hash back), `listing.rs`
//! (the queue and listings), `transfer.rs` (`store copy`), `health.rs`.
//!
//! Scripts are sent with `EVALSHA` and reloaded on `NOSCRIPT` (after a
//! restart or failover) by `redis::Script`. With `min_replicas_acked = N`, a
//! claim is followed by `WAIT N` on the key's master: a claim that N replicas
//! did not acknowledge in time fails (503) instead of risking a duplicate
//! after a failover. `WAIT` holds up the connection it is sent on (and must
//! follow the write on that same connection), so claims and completions that
//! wait run on connections of their own — a pool of them for one Redis, a
//! second cluster connection for a cluster — and a slow replica never delays
//! the renewals, reads and releases on the shared connection.

mod connect;
mod fields;
mod guard;
mod health;
mod layout;
mod listing;
mod packed;
mod prelude;
mod repair;
mod scripts;
mod sentinel;
mod transfer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{Script, Value};

pub use self::connect::{check_url, Cluster, Connector, Single};
use self::fields::{parse_record, record_or_none};
use self::guard::Taken;
use self::listing::{COUNT, LIST, LISTED_FIELDS, QUEUED};
use self::prelude::{script, script_stamped};
use self::scripts::{
    BLOCKED, CLAIM, COMPLETE, DELETE, FAIL, LEASE_DUE, LEASE_ORDERED, OLDEST_OWED, PROBE, RELEASE,
    RENEW,
};
pub use self::sentinel::{check_sentinels, Sentinel};
use super::{
    follow, settled, Backend, ClaimMode, ClaimOutcome, ClaimRequest, Deleted, Failure, Fleet,
    Invalidations, Lease, Record, RecordState, Records, StoreError, StoreKey,
};
use crate::replay::RecordedResponse;

/// How a claim checks its body's replay guard.
enum Guarded<'a> {
    /// In the claim script (the guard's slot is the key's), or no guard.
    Atomic,
    /// Stop where the guard would be checked (`guard.rs`, step 1).
    Ask,
    /// Claim, recording the guard token taken (step 4).
    Took(&'a str),
}

/// What a claim script that was not asked to stop at the guard did.
fn claimed(outcome: Option<ClaimOutcome>) -> Result<ClaimOutcome, StoreError> {
    outcome.ok_or_else(|| StoreError::Corrupt("a claim stopped at its guard unasked".into()))
}

pub struct RedisStore<C: Connector> {
    connector: C,
    /// `WAIT` for this many replicas after a claim or a completion (0: off).
    min_replicas_acked: u32,
    /// Whether scopes are sharded over a cluster's slots, so a body's guard
    /// and a key are apart (set when the layout is learned, `layout.rs`).
    sharded: AtomicBool,
    /// Whether new keys take the packed claim (`packed.rs`).
    packed: AtomicBool,
    /// Says whether they do (`hookgate_store_packed_claims`).
    packed_gauge: Option<prometheus::IntGauge>,
    /// Whether a packed claim is completed packed too (`packed.rs`).
    packed_completions: bool,
    /// Redis's clock as last read, for the packed claim's lease.
    clock: packed::RedisClock,
    /// How long `WAIT` may take.
    wait_timeout: Duration,
    claim: Script,
    renew: Script,
    complete: Script,
    fail: Script,
    lease_due: Script,
    lease_ordered: Script,
    blocked: Script,
    release: Script,
    delete: Script,
    list: Script,
    count: Script,
    queued: Script,
    oldest_owed: Script,
    probe: Script,
}

impl<C: Connector> RedisStore<C> {
    fn with(connector: C, timeout: Duration, min_replicas_acked: u32) -> Self {
        Self {
            connector,
            min_replicas_acked,
            sharded: AtomicBool::new(false),
            packed: AtomicBool::new(false),
            packed_gauge: None,
            packed_completions: false,
            clock: packed::RedisClock::default(),
            wait_timeout: timeout / 2,
            claim: script(CLAIM),
            renew: script(RENEW),
            complete: script_stamped(COMPLETE),
            fail: script(FAIL),
            lease_due: script(LEASE_DUE),
            lease_ordered: script(LEASE_ORDERED),
            blocked: script(BLOCKED),
            release: script(RELEASE),
            delete: script(DELETE),
            list: script(&LIST.replace("{FIELDS}", &format!("{{{LISTED_FIELDS}}}"))),
            count: script(COUNT),
            queued: script(QUEUED),
            oldest_owed: script(OLDEST_OWED),
            probe: script(PROBE),
        }
    }

    /// `WAIT` until `min_replicas_acked` replicas hold what this connection
    /// wrote (to `key`, on the master that serves it).
    async fn replicate(
        &self,
        connection: &mut C::AckedConnection,
        key: &str,
    ) -> Result<(), StoreError> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.min_replicas_acked)
            .arg(self.wait_timeout.as_millis() as u64);
        let acked = match C::send_to_master_of(connection, key, wait)
            .await
            .map_err(backend)?
        {
            Value::Int(n) => n,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "unexpected WAIT reply {other:?}"
                )))
            }
        };
        if acked < i64::from(self.min_replicas_acked) {
            return Err(StoreError::Backend(format!(
                "only {acked} of {} replicas acknowledged the write in time",
                self.min_replicas_acked
            )));
        }
        Ok(())
    }

    /// The claim script for `request`, its guard checked as `guarded` says;
    /// `None` where it stopped at the guard.
    async fn run_claim(
        &self,
        request: &ClaimRequest<'_>,
        token: &str,
        guarded: Guarded<'_>,
    ) -> Result<Option<ClaimOutcome>, StoreError> {
        let mut invocation = self.claim.key(request.key.as_str());
        if let (Guarded::Atomic, Some(guard)) = (&guarded, request.guard_key) {
            invocation.key(guard.as_str());
        }
        invocation
            .arg(token)
            .arg(request.body_sha256)
            .arg(request.processing_ttl.as_millis() as u64)
            .arg(request.retention.as_millis() as u64)
            .arg(request.key.source())
            .arg(request.key.id())
            .arg(request.mode.code());
        match request.stored {
            Some(stored) => invocation
                .arg(stored.route)
                .arg(stored.replay_of.unwrap_or_default())
                .arg(stored.request.method.as_str())
                .arg(stored.request.query.as_deref().unwrap_or_default())
                .arg(stored.request.encode_headers())
                .arg(stored.request.body.as_ref()),
            None => invocation.arg("").arg("").arg("").arg("").arg("").arg(""),
        };
        match guarded {
            Guarded::Atomic => invocation.arg("").arg(""),
            Guarded::Ask => invocation.arg("").arg("1"),
            Guarded::Took(token) => invocation.arg(token).arg(""),
        };
        match request.order {
            Some(spot) => invocation
                .arg(spot.entity)
                .arg(spot.value.map(|v| v.to_string()).unwrap_or_default())
                .arg(spot.hold.as_millis() as u64),
            None => invocation.arg("").arg("").arg(0),
        };
        let reply: Vec<Value> = if self.min_replicas_acked == 0 {
            let mut connection = self.connector.connection().await?;
            invocation.invoke_async(&mut connection).await
        } else {
            // A claim a failover could lose is no claim: fail (503) and let
            // the lease lapse rather than forward unprotected.
            let mut connection = self.connector.acked().await?;
            let reply: redis::RedisResult<Vec<Value>> =
                invocation.invoke_async(&mut *connection).await;
            if let Ok([Value::Int(1..=3), ..]) = reply.as_deref() {
                self.replicate(&mut connection, request.key.as_str())
                    .await?;
            }
            reply
        }
        .map_err(backend)?;
        let outcome = match reply.as_slice() {
            [Value::Int(4)] => return Ok(None),
            [Value::Int(1), _] if request.mode == ClaimMode::Accept => Ok(ClaimOutcome::Queued),
            [Value::Int(2)] => Ok(ClaimOutcome::Queued),
            [Value::Int(3), Value::Int(ms)] => Ok(ClaimOutcome::InFlight {
                retry_after: Duration::from_millis(*ms as u64).max(Duration::from_secs(1)),
            }),
            [Value::Int(1), Value::Int(attempts)] => Ok(ClaimOutcome::New(Lease {
                token: token.to_owned(),
                attempt: *attempts as u32,
            })),
            [Value::Int(0), Value::Int(now), fields] => {
                // The script found it completed or live (by Redis's clock).
                let record = parse_record(fields)?;
                Ok(
                    settled(record, *now as u64, request.mode).unwrap_or(ClaimOutcome::InFlight {
                        retry_after: Duration::from_secs(1),
                    }),
                )
            }
            other => Err(StoreError::Corrupt(format!(
                "unexpected claim reply {other:?}"
            ))),
        };
        outcome.map(Some)
    }

    /// Whether a body's guard lives in another slot than the key it
    /// guards (`guard.rs`).
    pub(super) fn guard_apart(&self) -> bool {
        C::HASH_TAGS && self.sharded.load(Ordering::Relaxed)
    }

    /// Run a compare-and-set script: 1 when the token matched.
    async fn applied(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<bool, StoreError> {
        let applied: i64 = self.invoke(invocation).await?;
        Ok(applied == 1)
    }

    async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connector.connection().await?;
        invocation
            .invoke_async(&mut connection)
            .await
            .map_err(backend)
    }
}

impl<C: Connector> Backend for RedisStore<C> {
    const NAME: &'static str = C::NAME;
    /// One Redis takes a key and its body's guard from any two namespaces;
    /// on a cluster they may be in two slots, and `guard.rs` checks the
    /// guard in steps of its own.
    const SHARDABLE: bool = true;

    fn namespace(key_prefix: &str, scope: &str, shard: Option<u16>) -> String {
        let scope: std::borrow::Cow<'_, str> = match shard {
            None => scope.into(),
            Some(shard) => format!("{scope}.{shard}").into(),
        };
        // On every delivery's path: joined, not formatted.
        match C::HASH_TAGS {
            true => [key_prefix, "{", &scope, "}"].concat(),
            false => [key_prefix, &scope].concat(),
        }
    }
}

impl<C: Connector> Records for RedisStore<C> {
    async fn claim(
        &self,
        request: ClaimRequest<'_>,
        token: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        if let Some(outcome) = self.claim_packed(&request, token).await? {
            return Ok(outcome);
        }
        let Some(guard) = request.guard_key.filter(|_| self.guard_apart()) else {
            return claimed(self.run_claim(&request, token, Guarded::Atomic).await?);
        };
        // The guard is in a slot of its own (guard.rs).
        if let Some(outcome) = self.run_claim(&request, token, Guarded::Ask).await? {
            return Ok(outcome);
        }
        match self.take_guard(&request, guard, token).await? {
            Taken::Answer(outcome) => Ok(*outcome),
            Taken::Mine { at } if at.elapsed() >= request.processing_ttl / 2 => {
                Ok(ClaimOutcome::InFlight {
                    retry_after: Duration::from_secs(1),
                })
            }
            Taken::Mine { .. } => claimed(
                self.run_claim(&request, token, Guarded::Took(token))
                    .await?,
            ),
        }
    }

    async fn renew(
        &self,
        key: &StoreKey,
        token: &str,
        processing_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut invocation = self.renew.key(key.as_str());
        invocation
            .arg(token)
            .arg(processing_ttl.as_millis() as u64)
            .arg(key.source())
            .arg(key.id());
        self.applied(&invocation).await
    }

    async fn complete(
        &self,
        key: &StoreKey,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let mut invocation = self.complete.key(key.as_str());
        invocation
            .arg(token)
            .arg(response.status.as_u16())
            .arg(response.encode_headers())
            .arg(response.body.as_ref())
            .arg(retention.as_millis() as u64)
            .arg(response.body_kept.as_str())
            .arg(key.source())
            .arg(key.id())
            .arg(if self.packed_completions { "1" } else { "0" })
            .arg(self.redis_now_ms().await?);
        if self.min_replicas_acked == 0 {
            return self.applied(&invocation).await;
        }
        let (source, id) = (key.source(), key.id());
        let key = key.as_str();
        let mut connection = self.connector.acked().await?;
        let applied: i64 = invocation
            .invoke_async(&mut *connection)
            .await
            .map_err(backend)?;
        if applied == 1 {
            // The upstream has answered: the recording is kept whatever the
            // replicas say, but an unreplicated one is worth a warning.
            if let Err(error) = self.replicate(&mut connection, key).await {
                tracing::warn!(
                    scope = source, key = id, %error,
                    "completion not acknowledged by replicas; a failover now could forward a retry again"
                );
            }
        }
        Ok(applied == 1)
    }

    async fn fail(
        &self,
        key: &StoreKey,
        token: &str,
        failure: &Failure<'_>,
    ) -> Result<Option<RecordState>, StoreError> {
        let mut invocation = self.fail.key(key.as_str());
        invocation
            .arg(token)
            .arg(failure.state(false).as_str())
            .arg(if failure.holds(false) { "1" } else { "0" })
            .arg(failure.class.as_str())
            .arg(failure.status.map(|s| s.to_string()).unwrap_or_default())
            .arg(failure.route)
            .arg(failure.request.method.as_str())
            .arg(failure.request.query.as_deref().unwrap_or_default())
            .arg(failure.request.encode_headers())
            .arg(failure.request.body.as_ref())
            .arg(failure.retention.as_millis() as u64)
            .arg(key.source())
            .arg(key.id())
            .arg(
                failure
                    .next
                    .queued
                    .map(|retry| (retry.as_millis() as u64).to_string())
                    .unwrap_or_default(),
            )
            .arg(failure.attempt.line());
        let reply: Value = self.invoke(&invocation).await?;
        match reply {
            Value::Int(0) => Ok(None),
            Value::BulkString(state) => std::str::from_utf8(&state)
                .ok()
                .and_then(RecordState::parse)
                .map(Some)
                .ok_or_else(|| StoreError::Corrupt("a failure's state".into())),
            other => Err(StoreError::Corrupt(format!(
                "unexpected failure reply {other:?}"
            ))),
        }
    }

    async fn release(&self, key: &StoreKey, token: &str) -> Result<bool, StoreError> {
        let mut invocation = self.release.key(key.as_str());
        invocation.arg(token).arg(key.source()).arg(key.id());
        self.applied(&invocation).await
    }

    async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let key = key.as_str();
        let mut connection = self.connector.connection().await?;
        let fields: Value = match redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut connection)
            .await
        {
            Err(error) if error.code() == Some("WRONGTYPE") => return self.get_opened(key).await,
            read => read.map_err(backend)?,
        };
        record_or_none(&fields)
    }

    async fn delete(&self, key: &StoreKey, force: bool) -> Result<Deleted, StoreError> {
        let mut connection = self.connector.connection().await?;
        let answer: i64 = self
            .delete
            .key(key.as_str())
            .arg(if force { "1" } else { "0" })
            .arg(key.source())
            .arg(key.id())
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(match answer {
            1 => Deleted::Deleted,
            2 => Deleted::InFlight,
            _ => Deleted::NotFound,
        })
    }
}

impl<C: Connector> Fleet for RedisStore<C> {
    /// A hash per key prefix, `{prefix}route-controls`, route → value.
    async fn set_control(
        &self,
        space: &str,
        route: &str,
        value: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut connection = self.connector.connection().await?;
        let mut command = redis::cmd(if value.is_some() { "HSET" } else { "HDEL" });
        command.arg(format!("{space}route-controls")).arg(route);
        if let Some(value) = value {
            command.arg(value);
        }
        command
            .query_async::<i64>(&mut connection)
            .await
            .map(drop)
            .map_err(backend)
    }

    async fn layout(&self, space: &str, scopes: &[String], wanted: u16) -> Result<u16, StoreError> {
        self.learn_layout(space, scopes, wanted).await
    }

    async fn controls(&self, space: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut connection = self.connector.connection().await?;
        redis::cmd("HGETALL")
            .arg(format!("{space}route-controls"))
            .query_async::<Vec<(String, String)>>(&mut connection)
            .await
            .map_err(backend)
    }

    /// A script that does what every delivery's scripts do — `TIME`, a
    /// hash write with an expiry, a read — on `{space}readyz`: an ACL that
    /// lets `PING` through but not the deliveries fails here, and `/readyz`
    /// says so.
    /// Pub/sub on the channel, through the first node that answers (on a
    /// cluster a `PUBLISH` on one node reaches the subscribers of all).
    fn invalidations(&self) -> Invalidations {
        let Some(mut subscriber) = self.connector.subscriber() else {
            return Invalidations::Unsupported;
        };
        Invalidations::Feed(Box::new(move |channel, cache| {
            follow(&cache, move || {
                let client = subscriber();
                let channel = channel.clone();
                async move {
                    let mut pubsub = client.await?.get_async_pubsub().await.ok()?;
                    pubsub.subscribe(&channel).await.ok()?;
                    Some(pubsub.into_on_message())
                }
            });
        }))
    }

    async fn publish(&self, channel: &str, key: &str) -> Result<(), StoreError> {
        let mut connection = self.connector.connection().await?;
        redis::cmd("PUBLISH")
            .arg(channel)
            .arg(key)
            .query_async::<i64>(&mut connection)
            .await
            .map(drop)
            .map_err(backend)
    }
}

fn backend(err: redis::RedisError) -> StoreError {
    StoreError::Backend(err.to_string())
}

/// The listing index of `source`'s records in `state`.
fn index_key(source: &str, state: RecordState) -> String {
    format!("{source}!{}", state.as_str())
}
