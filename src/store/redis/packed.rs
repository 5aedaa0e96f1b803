//! The packed claim: a new key claimed by one `SET key value NX GET PX
//! retention` instead of the claim script (BENCHMARKS.md, "The packed
//! claim": a script costs Redis about 15 µs beyond the commands it runs,
//! and the claim is one per new event).
//!
//! A packed record is a string, `p1:{token}:{body_sha256}:{lease_until}:
//! {source length}`: a sync delivery's first claim, with nothing else to
//! keep (no stored request, no replay guard, no order). Whatever reads a
//! record by its key — every script, through `OPEN_PACKED` (`prelude.rs`) — first makes
//! it the hash every other record is, in place: `processing`, the token,
//! the body's hash, attempt 1, its lease, its expiry kept, and its entry in
//! the `processing` listing. So a duplicate, renewal, completion, failure,
//! release, forget, listing or copy meets the one shape it knows, and a
//! delivery whose gateway died leaves the same record behind as a hashed
//! claim does. Until something reads it, a packed claim is in no listing.
//!
//! Redis judges every lease by its own clock, and the packed claim, being
//! no script, cannot read it: its lease end is Redis's time as this
//! process last read it (`TIME`, at most [`CLOCK_AGE`] ago, carried forward
//! on the monotonic clock) plus the lease — off by the read's one-way
//! trip and the clocks' drift since, milliseconds against a lease of
//! seconds.
//!
//! The writer is on unless the config turns it off (`store.packed_claims
//! = false`): a gateway of a release before the packed claim reads a
//! packed record as an error, so a fleet rolling from one turns it off
//! until every instance reads it (docs/operations/upgrading.md, "Upgrading").
//!
//! A packed claim's completion is packed too (`store.packed_completions`,
//! on unless the config turns it off): one `SET … PX retention` of
//! `p2:{status}:{body_kept}:{attempts}:{first_seen}:{completed_at}:
//! {body_sha256}:{headers length}:{headers}{body}` (the headers as a hash
//! record keeps them, their length in bytes), listed as completed when it
//! is written, instead of deleting the string and writing an 11-field hash
//! with its expiry (BENCHMARKS.md, "Redis CPU per event"). A duplicate's
//! `SET … NX GET` gets it back and answers from it with no script
//! ([`completed_fields`]); every other reader opens it into the completed
//! hash it stands for, as it opens a packed claim. Releases before 6e7acd4
//! read it as an error, so a fleet rolling from one turns it off until
//! every instance reads it (docs/operations/upgrading.md, "Upgrading").

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;
use tokio::time::Instant;

use redis::{Script, Value};

use super::fields::{parse_record, record_or_none};
use super::prelude::script;
use super::{backend, Connector, RedisStore};
use crate::store::{ClaimMode, ClaimOutcome, ClaimRequest, Lease, Record, StoreError};

/// How old the reading of Redis's clock may be.
const CLOCK_AGE: Duration = Duration::from_secs(5);

/// KEYS[1] a record; returns its HGETALL, a packed record opened first.
static OPENED: LazyLock<Script> =
    LazyLock::new(|| script("return redis.call('HGETALL', opened(KEYS[1]))"));

/// Redis's clock as last read: its time minus this process's monotonic
/// time, both in ms, and when it was read.
#[derive(Default)]
pub(super) struct RedisClock {
    offset_ms: AtomicI64,
    /// Monotonic ms since `EPOCH` at the reading; 0 never read.
    read_at_ms: AtomicU64,
}

/// The monotonic clock's origin.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn monotonic_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64 + 1
}

impl<C: Connector> RedisStore<C> {
    /// Claim new keys with the packed claim where it applies (see the
    /// module doc) when `claims` (`store.packed_claims`), and complete
    /// them packed when `completions` (`store.packed_completions`).
    pub(super) fn packing(mut self, claims: bool, completions: bool) -> Self {
        self.packed.store(claims, Ordering::Relaxed);
        self.packed_completions = completions;
        self
    }

    /// Say on `gauge` whether new keys take the packed claim.
    pub fn reporting(mut self, gauge: prometheus::IntGauge) -> Self {
        gauge.set(i64::from(self.packed.load(Ordering::Relaxed)));
        self.packed_gauge = Some(gauge);
        self
    }

    /// The server refused `SET … NX GET` (Redis before 7.0, at start or
    /// after a failover to an older server): every claim from now on is
    /// the hashed one, which every Redis runs. Nothing was written by the
    /// refused command, so the claim it was for goes on hashed.
    fn fall_back(&self, error: &redis::RedisError) {
        if self.packed.swap(false, Ordering::Relaxed) {
            tracing::warn!(%error, "store.packed_claims: this Redis refuses SET ... NX GET (it needs Redis 7.0 or later); new keys are claimed with the hashed claim until a restart");
            if let Some(gauge) = &self.packed_gauge {
                gauge.set(0);
            }
        }
    }

    /// The packed claim of `request`, when it applies: `None` when it does
    /// not, or when the key holds a record already (the claim script then
    /// decides, having opened a packed one).
    pub(super) async fn claim_packed(
        &self,
        request: &ClaimRequest<'_>,
        token: &str,
    ) -> Result<Option<ClaimOutcome>, StoreError> {
        let applies = self.packed.load(Ordering::Relaxed)
            && request.mode == ClaimMode::Deliver
            && request.guard_key.is_none()
            && request.stored.is_none()
            && request.order.is_none()
            // A claim that must reach replicas waits for them in the script's path.
            && self.min_replicas_acked == 0;
        if !applies {
            return Ok(None);
        }
        let lease_until = self.redis_now_ms().await? + request.processing_ttl.as_millis() as u64;
        let mut connection = self.connector.connection().await?;
        // Sized at once: `format!` alone regrows its string several times.
        let mut value = String::with_capacity(48 + token.len() + request.body_sha256.len());
        let source_len = request.key.source().len();
        let _ = write!(
            value,
            "p1:{token}:{}:{lease_until}:{source_len}",
            request.body_sha256
        );
        let reply: redis::RedisResult<Option<Value>> = redis::cmd("SET")
            .arg(request.key.as_str())
            .arg(value)
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(request.retention.as_millis() as u64)
            .query_async(&mut connection)
            .await;
        match reply {
            Ok(None) => Ok(Some(ClaimOutcome::New(Lease {
                token: token.to_owned(),
                attempt: 1,
            }))),
            // A packed completion answers a duplicate at once.
            Ok(Some(Value::BulkString(held))) if held.starts_with(b"p2:") => {
                match completed_fields(&held) {
                    Some(fields) => Ok(Some(ClaimOutcome::Completed(parse_record(&fields)?))),
                    None => Ok(None),
                }
            }
            // A packed claim is there: the claim script opens and judges it.
            Ok(Some(_)) => Ok(None),
            Err(error) if error.code() == Some("WRONGTYPE") => Ok(None),
            // A syntax error: a server that cannot take the packed claim.
            // Never an outage, never an unprotected forward: hashed from now.
            Err(error) if error.code() == Some("ERR") => {
                self.fall_back(&error);
                Ok(None)
            }
            Err(error) => Err(backend(error)),
        }
    }

    /// Redis's time now, in Unix ms, from the last reading of its clock
    /// (read again when older than [`CLOCK_AGE`]).
    pub(super) async fn redis_now_ms(&self) -> Result<u64, StoreError> {
        let clock = &self.clock;
        let read_at = clock.read_at_ms.load(Ordering::Acquire);
        let now = monotonic_ms();
        if read_at != 0 && now - read_at < CLOCK_AGE.as_millis() as u64 {
            return Ok(now.saturating_add_signed(clock.offset_ms.load(Ordering::Acquire)));
        }
        let mut connection = self.connector.connection().await?;
        let before = monotonic_ms();
        let (seconds, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        let after = monotonic_ms();
        let redis_ms = seconds * 1000 + micros / 1000;
        let middle = before + (after - before) / 2;
        clock
            .offset_ms
            .store(redis_ms as i64 - middle as i64, Ordering::Release);
        clock.read_at_ms.store(middle, Ordering::Release);
        Ok(redis_ms + (after - middle))
    }

    /// The record at `key`, which holds something other than a hash (a
    /// plain `HGETALL` met a packed record): opened, then read.
    pub(super) async fn get_opened(&self, key: &str) -> Result<Option<Record>, StoreError> {
        let mut connection = self.connector.connection().await?;
        let fields: Value = OPENED
            .key(key)
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        record_or_none(&fields)
    }
}

/// A packed completion (`p2:…`, see the module doc) as the `HGETALL` of
/// the completed hash it opens into: the fields `OPEN_PACKED`
/// (`prelude.rs`) writes, from the same pattern; `None` for anything else,
/// which the claim script then judges as it would.
fn completed_fields(held: &[u8]) -> Option<Value> {
    let rest = held.strip_prefix(b"p2:")?;
    let mut parts = rest.splitn(8, |&b| b == b':');
    let mut next = |valid: fn(&u8) -> bool| {
        parts
            .next()
            .filter(|part| !part.is_empty() && part.iter().all(valid))
    };
    let digits = |b: &u8| b.is_ascii_digit();
    let (status, kept, attempts) = (next(digits)?, next(u8::is_ascii_alphabetic)?, next(digits)?);
    let (first_seen, completed_at) = (next(digits)?, next(digits)?);
    let sha = next(|_| true)?;
    let length: usize = std::str::from_utf8(next(digits)?).ok()?.parse().ok()?;
    let rest = parts.next().unwrap_or_default();
    let (headers, body) = (rest.get(..length)?, rest.get(length..)?);
    let fields: [(&str, &[u8]); 10] = [
        ("state", b"completed"),
        ("completed_at", completed_at),
        ("updated", completed_at),
        ("status", status),
        ("headers", headers),
        ("body", body),
        ("body_kept", kept),
        ("body_sha256", sha),
        ("attempts", attempts),
        ("first_seen", first_seen),
    ];
    Some(Value::Array(
        fields
            .into_iter()
            .flat_map(|(name, value)| {
                [
                    Value::BulkString(name.as_bytes().to_vec()),
                    Value::BulkString(value.to_vec()),
                ]
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_completion_reads_as_its_hash() {
        let held =
            b"p2:201:whole:1:1700000000000:1700000000042:abcd:25:content-type: text/plain\nok: a:b";
        let record = parse_record(&completed_fields(held).unwrap()).unwrap();
        assert_eq!(record.state, crate::store::RecordState::Completed);
        assert_eq!(record.completed_at_ms, Some(1_700_000_000_042));
        assert_eq!(record.updated_ms, 1_700_000_000_042);
        assert_eq!(record.first_seen_ms, 1_700_000_000_000);
        assert_eq!(record.body_sha256, "abcd");
        assert_eq!(record.attempts, 1);
        let response = record.response.unwrap();
        assert_eq!(response.status.as_u16(), 201);
        assert_eq!(response.headers["content-type"], "text/plain");
        assert_eq!(&response.body[..], b"ok: a:b");
        // Anything else is left to the claim script.
        for other in [
            &b"p1:t:s:1:2"[..],
            b"p2:201:whole:1:1:2:abcd:99:short",
            b"p2:2x1:whole:1:1:2:abcd:0:",
            b"p2:201:whole:1:1:2:abcd",
        ] {
            assert!(completed_fields(other).is_none(), "{other:?}");
        }
    }
}
