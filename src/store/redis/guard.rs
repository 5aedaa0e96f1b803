//! The replay guard on a sharded Redis Cluster, where a body's guard and an
//! event's record live in different slots and no one script can check the
//! guard and claim the key together.
//!
//! A guard there holds `{first key}\n{guard token}\n{taken at}\n{replaced}`:
//! which key took the body, with which token, when (by the guard's
//! master's clock), and — when the take it replaced was the same key's —
//! when that one was made.
//! A claim whose key is free:
//! 1. asks the claim script to stop where the guard would be checked;
//! 2. reads the guard; when it names another key, reads that key's record:
//!    one that answers (completed, dead, queued, a live lease) answers this
//!    delivery too, as it does where the two are checked in one script;
//! 3. takes the guard by compare-and-set from what it read — unless the
//!    other key may still claim with a take: its latest, made less than
//!    `processing_ttl` ago and not yet in its record (`guard_token`), or
//!    one its own later take replaced less than half a `processing_ttl`
//!    ago. Then that key is between a take and its claim, and this
//!    delivery is in flight beside it (409);
//! 4. claims its key, writing the token it took into the record
//!    (`guard_token`), within half a `processing_ttl` of the take — later,
//!    it answers in flight instead, so a take is never used after the
//!    others may consider it abandoned.
//!
//! Two deliveries of one body under two keys race on one compare-and-set,
//! and the loser reads the winner's take. `tests/it/model/guard.rs` checks
//! that no key is claimed while another key of its body answers. A guard
//! written by an older release holds only the key, and reads as a take that
//! has landed.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::fields::{bytes, pairs, parse_record};
use super::prelude::script;
use super::{Connector, RedisStore};
use crate::store::{
    settled, ClaimOutcome, ClaimRequest, Record, RecordState, StoreError, StoreKey,
};

/// KEYS[1] a guard; returns {value or '', the take's age in ms, the age
/// of the take it replaced (-1: none, or a guard of an older release)}.
const READ: &str = "
local v = redis.call('GET', KEYS[1])
if not v then return {'', -1, -1} end
local at, prev = string.match(v, '^.-\\n.-\\n(%d+)\\n(%d*)$')
if not at then return {v, -1, -1} end
local function age(ms) return ms ~= '' and math.max(now - tonumber(ms), 0) or -1 end
return {v, age(at), age(prev)}
";

/// KEYS[1] a guard; ARGV the value read ('' none), key, token, retention
/// ms, when the take it replaces was made ('' unless the same key's).
/// Takes the guard for key when it still holds what was read.
const TAKE: &str = "
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2] .. '\\n' .. ARGV[3] .. '\\n' .. now .. '\\n' .. ARGV[5],
  'PX', ARGV[4])
return 1
";

/// KEYS[1] a record; returns {now, HGETALL} (a packed record opened first).
const RECORD: &str = "return {now, redis.call('HGETALL', opened(KEYS[1]))}";

/// KEYS[1] a guard; ARGV key, expiry (Unix ms). A copied record's guard,
/// where none is held.
const IMPORT: &str = "
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
return 1
";

/// Compare-and-set rounds before a delivery gives up and answers in flight.
const ROUNDS: usize = 4;

static SCRIPTS: LazyLock<[Script; 4]> = LazyLock::new(|| [READ, TAKE, RECORD, IMPORT].map(script));

/// What the guard step decided.
pub(super) enum Taken {
    /// The guard is this key's: claim it, by `at`.
    Mine { at: tokio::time::Instant },
    /// Another key of this body answers this delivery.
    Answer(Box<ClaimOutcome>),
}

/// A guard's value: the first key, and — from this release on — the take's
/// token and when it was made.
struct Take<'a> {
    key: &'a str,
    token: Option<&'a str>,
    at: &'a str,
}

impl<'a> Take<'a> {
    fn parse(value: &'a str) -> Take<'a> {
        let mut parts = value.splitn(4, '\n');
        Take {
            key: parts.next().unwrap_or_default(),
            token: parts.next(),
            at: parts.next().unwrap_or_default(),
        }
    }
}

impl<C: Connector> RedisStore<C> {
    /// Steps 2 and 3 for `request`, whose key is free, taking its guard
    /// `guard` with `token`.
    pub(super) async fn take_guard(
        &self,
        request: &ClaimRequest<'_>,
        guard: &StoreKey,
        token: &str,
    ) -> Result<Taken, StoreError> {
        let [read, take, record, _] = &*SCRIPTS;
        let ttl_ms = request.processing_ttl.as_millis() as i64;
        for _ in 0..ROUNDS {
            let (value, age_ms, replaced_ms): (String, i64, i64) =
                self.invoke(&read.key(guard.as_str())).await?;
            let held = Take::parse(&value);
            let mine = held.key == request.key.as_str();
            if !value.is_empty() && !mine {
                let reply: Vec<Value> = self.invoke(&record.key(held.key)).await?;
                let (now, first, first_token) = first_record(&reply)?;
                if let Some(first) = first {
                    if answers(&first, now) {
                        let outcome = settled(first, now, request.mode).unwrap_or(IN_FLIGHT);
                        return Ok(Taken::Answer(Box::new(outcome)));
                    }
                }
                let landed = match held.token {
                    None => true,
                    Some(token) => first_token.as_deref() == Some(token),
                };
                // The taker may still claim: between its take and its claim
                // (until a lease has passed), or — for a take that key's own
                // later one replaced — within half a lease of it.
                let wait = match (landed, age_ms, replaced_ms) {
                    (false, age, _) if age >= 0 && age < ttl_ms => ttl_ms - age,
                    (_, _, replaced) if replaced >= 0 && replaced < ttl_ms / 2 => {
                        ttl_ms / 2 - replaced
                    }
                    _ => 0,
                };
                if wait > 0 {
                    return Ok(Taken::Answer(Box::new(ClaimOutcome::InFlight {
                        retry_after: Duration::from_millis(wait as u64).max(Duration::from_secs(1)),
                    })));
                }
            }
            let at = tokio::time::Instant::now();
            let mut invocation = take.key(guard.as_str());
            invocation
                .arg(&value)
                .arg(request.key.as_str())
                .arg(token)
                .arg(request.retention.as_millis() as u64)
                .arg(if mine { held.at } else { "" });
            let taken: i64 = self.invoke(&invocation).await?;
            if taken == 1 {
                return Ok(Taken::Mine { at });
            }
        }
        Ok(Taken::Answer(Box::new(IN_FLIGHT)))
    }

    /// A copied record's guard in a slot of its own: set where none is.
    pub(super) async fn import_guard(
        &self,
        guard: &StoreKey,
        key: &StoreKey,
        expires_at_ms: u64,
    ) -> Result<(), StoreError> {
        let mut invocation = SCRIPTS[3].key(guard.as_str());
        invocation.arg(key.as_str()).arg(expires_at_ms);
        self.invoke::<i64>(&invocation).await.map(drop)
    }
}

const IN_FLIGHT: ClaimOutcome = ClaimOutcome::InFlight {
    retry_after: Duration::from_secs(1),
};

/// Whether `record` answers a delivery of another key of its body, as the
/// claim script's `answers` does.
fn answers(record: &Record, now_ms: u64) -> bool {
    matches!(
        record.state,
        RecordState::Completed | RecordState::Dead | RecordState::Queued
    ) || record
        .lease_expires_at_ms
        .is_some_and(|until| until > now_ms)
}

/// The `RECORD` reply: Redis's time, the record if there is one, and the
/// guard token its last claim took.
fn first_record(reply: &[Value]) -> Result<(u64, Option<Record>, Option<String>), StoreError> {
    let [Value::Int(now), fields] = reply else {
        return Err(StoreError::Corrupt(format!(
            "unexpected record reply {reply:?}"
        )));
    };
    let pairs = pairs(fields).unwrap_or_default();
    if pairs.is_empty() {
        return Ok((*now as u64, None, None));
    }
    let token = pairs
        .iter()
        .find(|(name, _)| bytes(name) == b"guard_token")
        .map(|(_, value)| String::from_utf8_lossy(&bytes(value)).into_owned());
    Ok((*now as u64, Some(parse_record(fields)?), token))
}
