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
//! Every script touches keys of one slot: a single key, or — with the replay
//! guard — keys sharing the route's `{scope}` hash tag.
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

use std::time::Duration;

use redis::{Script, Value};

pub use self::connect::{check_url, Cluster, Connector, Single};
use super::{
    settled, Backend, ClaimOutcome, ClaimRequest, Deleted, Lease, Record, RecordState, StoreError,
    StoreKey,
};
use crate::replay::{BodyKept, RecordedResponse};

/// The current Redis time in ms, shared by every script.
const NOW: &str = "local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// KEYS[1] key, optional KEYS[2] replay guard (checked whenever the key is
/// claimable, not only when it is new); ARGV token, body_sha256,
/// lease ms, retention ms. Returns {1, attempts} when claimed,
/// {0, now, HGETALL...} of the record that answers otherwise.
const CLAIM: &str = "
local function settled(key)
  local s = redis.call('HMGET', key, 'state', 'lease_until')
  return s[1] == 'completed' or (s[1] == 'processing' and tonumber(s[2]) > now)
end
if settled(KEYS[1]) then return {0, now, redis.call('HGETALL', KEYS[1])} end
local r = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if KEYS[2] then
  local first = redis.call('GET', KEYS[2])
  if first and first ~= KEYS[1] and settled(first) then
    return {0, now, redis.call('HGETALL', first)}
  end
end
local attempts = (tonumber(r[2]) or 0) + 1
if not r[1] then redis.call('HSET', KEYS[1], 'first_seen', now) end
redis.call('HSET', KEYS[1], 'state', 'processing', 'token', ARGV[1], 'body_sha256', ARGV[2],
  'attempts', attempts, 'lease_until', now + tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if KEYS[2] then redis.call('SET', KEYS[2], KEYS[1], 'PX', ARGV[4]) end
return {1, attempts}
";

/// KEYS[1] key; ARGV token, lease ms.
const RENEW: &str = "
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[2]))
return 1
";

/// KEYS[1] key; ARGV token, status, headers, body, retention ms, body kept.
const COMPLETE: &str = "
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'completed_at', now,
  'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4], 'body_kept', ARGV[6])
redis.call('HDEL', KEYS[1], 'token', 'lease_until')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
";

/// KEYS[1] key; ARGV token.
const RELEASE: &str = "
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'released')
redis.call('HDEL', KEYS[1], 'token', 'lease_until')
return 1
";

/// KEYS[1] key; ARGV force ("1" or "0"). Returns 1 deleted, 2 in flight,
/// 0 not found.
const DELETE: &str = "
local s = redis.call('HMGET', KEYS[1], 'state', 'lease_until')
if not s[1] then return 0 end
if ARGV[1] ~= '1' and s[1] == 'processing' and tonumber(s[2]) > now then return 2 end
redis.call('DEL', KEYS[1])
return 1
";

pub struct RedisStore<C: Connector> {
    connector: C,
    /// `WAIT` for this many replicas after a claim or a completion (0: off).
    min_replicas_acked: u32,
    /// How long `WAIT` may take.
    wait_timeout: Duration,
    claim: Script,
    renew: Script,
    complete: Script,
    release: Script,
    delete: Script,
}

impl<C: Connector> RedisStore<C> {
    fn with(connector: C, timeout: Duration, min_replicas_acked: u32) -> Self {
        let script = |body: &str| Script::new(&format!("{NOW}{body}"));
        Self {
            connector,
            min_replicas_acked,
            wait_timeout: timeout / 2,
            claim: script(CLAIM),
            renew: script(RENEW),
            complete: script(COMPLETE),
            release: script(RELEASE),
            delete: script(DELETE),
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

    /// Run a compare-and-set script: 1 when the token matched.
    async fn applied(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<bool, StoreError> {
        let mut connection = self.connector.connection().await?;
        let applied: i64 = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(applied == 1)
    }
}

impl<C: Connector> Backend for RedisStore<C> {
    const NAME: &'static str = C::NAME;
    const HASH_TAGS: bool = C::HASH_TAGS;

    async fn claim(
        &self,
        request: ClaimRequest<'_>,
        token: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        let token = token.to_owned();
        let mut invocation = self.claim.key(request.key.as_str());
        if let Some(guard) = request.guard_key {
            invocation.key(guard.as_str());
        }
        invocation
            .arg(&token)
            .arg(request.body_sha256)
            .arg(request.processing_ttl.as_millis() as u64)
            .arg(request.retention.as_millis() as u64);
        let reply: Vec<Value> = if self.min_replicas_acked == 0 {
            let mut connection = self.connector.connection().await?;
            invocation.invoke_async(&mut connection).await
        } else {
            // A claim a failover could lose is no claim: fail (503) and let
            // the lease lapse rather than forward unprotected.
            let mut connection = self.connector.acked().await?;
            let reply: redis::RedisResult<Vec<Value>> =
                invocation.invoke_async(&mut *connection).await;
            if let Ok([Value::Int(1), ..]) = reply.as_deref() {
                self.replicate(&mut connection, request.key.as_str())
                    .await?;
            }
            reply
        }
        .map_err(backend)?;
        match reply.as_slice() {
            [Value::Int(1), Value::Int(attempts)] => Ok(ClaimOutcome::New(Lease {
                token,
                attempt: *attempts as u32,
            })),
            [Value::Int(0), Value::Int(now), fields] => {
                // The script found it completed or live (by Redis's clock).
                let record = parse_record(fields)?;
                Ok(
                    settled(record, *now as u64).unwrap_or(ClaimOutcome::InFlight {
                        retry_after: Duration::from_secs(1),
                    }),
                )
            }
            other => Err(StoreError::Corrupt(format!(
                "unexpected claim reply {other:?}"
            ))),
        }
    }

    async fn renew(
        &self,
        key: &StoreKey,
        token: &str,
        processing_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let key = key.as_str();
        let mut invocation = self.renew.key(key);
        invocation.arg(token).arg(processing_ttl.as_millis() as u64);
        self.applied(&invocation).await
    }

    async fn complete(
        &self,
        key: &StoreKey,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let key = key.as_str();
        let mut invocation = self.complete.key(key);
        invocation
            .arg(token)
            .arg(response.status.as_u16())
            .arg(response.encode_headers())
            .arg(response.body.as_ref())
            .arg(retention.as_millis() as u64)
            .arg(response.body_kept.as_str());
        if self.min_replicas_acked == 0 {
            return self.applied(&invocation).await;
        }
        let mut connection = self.connector.acked().await?;
        let applied: i64 = invocation
            .invoke_async(&mut *connection)
            .await
            .map_err(backend)?;
        if applied == 1 {
            // The upstream has answered: the recording is kept whatever the
            // replicas say, but an unreplicated one is worth a warning.
            if let Err(error) = self.replicate(&mut connection, key).await {
                tracing::warn!(%error, "completion not acknowledged by replicas; a failover now could forward a retry again");
            }
        }
        Ok(applied == 1)
    }

    async fn release(&self, key: &StoreKey, token: &str) -> Result<bool, StoreError> {
        let key = key.as_str();
        let mut invocation = self.release.key(key);
        invocation.arg(token);
        self.applied(&invocation).await
    }

    async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let key = key.as_str();
        let mut connection = self.connector.connection().await?;
        let fields: Value = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        match &fields {
            Value::Array(items) if items.is_empty() => Ok(None),
            Value::Map(items) if items.is_empty() => Ok(None),
            _ => parse_record(&fields).map(Some),
        }
    }

    async fn delete(&self, key: &StoreKey, force: bool) -> Result<Deleted, StoreError> {
        let key = key.as_str();
        let mut connection = self.connector.connection().await?;
        let answer: i64 = self
            .delete
            .key(key)
            .arg(if force { "1" } else { "0" })
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(match answer {
            1 => Deleted::Deleted,
            2 => Deleted::InFlight,
            _ => Deleted::NotFound,
        })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let mut connection = self.connector.connection().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map(drop)
            .map_err(backend)
    }

    /// Redis settings that would silently lose claims: eviction (a claim or
    /// recording evicted under memory pressure is a forgotten event) and, for
    /// retentions over a day, no persistence (a Redis restart forgets
    /// everything). `CONFIG` may be refused on managed Redis; then nothing is
    /// reported.
    async fn risks(&self, longest_retention: Duration) -> Vec<String> {
        let mut risks = Vec::new();
        let Ok(connection) = self.connector.connection().await else {
            return risks;
        };
        let config = |name: &'static str| {
            let mut connection = connection.clone();
            async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(name)
                    .query_async::<Vec<String>>(&mut connection)
                    .await
                    .ok()
                    .and_then(|pair| pair.get(1).cloned())
            }
        };
        if let Some(policy) = config("maxmemory-policy")
            .await
            .filter(|p| p != "noeviction")
        {
            risks.push(format!(
                "Redis maxmemory-policy is {policy:?}: under memory pressure Redis may evict claims and \
                 recordings, and evicted events are processed again; set it to \"noeviction\""
            ));
        }
        if longest_retention > Duration::from_secs(86_400) {
            let aof = config("appendonly").await;
            let save = config("save").await;
            if aof.as_deref() == Some("no") && save.as_deref() == Some("") {
                risks.push(
                    "Redis persistence is off (appendonly no, no save points): a Redis restart forgets every \
                     claim and recording; enable AOF (appendonly yes)"
                        .to_owned(),
                );
            }
        }
        risks
    }
}

fn backend(err: redis::RedisError) -> StoreError {
    StoreError::Backend(err.to_string())
}

/// Turn an `HGETALL` reply (RESP2 flat array or RESP3 map) into a record.
fn parse_record(fields: &Value) -> Result<Record, StoreError> {
    let pairs: Vec<(&Value, &Value)> = match fields {
        Value::Array(items) => items.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        Value::Map(items) => items.iter().map(|(k, v)| (k, v)).collect(),
        other => return Err(StoreError::Corrupt(format!("record is {other:?}"))),
    };
    let bytes = |value: &Value| -> Vec<u8> {
        match value {
            Value::BulkString(b) => b.clone(),
            Value::SimpleString(s) => s.clone().into_bytes(),
            Value::Int(n) => n.to_string().into_bytes(),
            _ => Vec::new(),
        }
    };
    let mut state = None;
    let mut record = Record {
        state: RecordState::Processing,
        token: None,
        body_sha256: String::new(),
        attempts: 0,
        first_seen_ms: 0,
        lease_expires_at_ms: None,
        completed_at_ms: None,
        response: None,
    };
    let (mut status, mut headers, mut body) = (None, Vec::new(), Vec::new());
    // Records written before `body_kept` existed held their body whole.
    let mut kept = Some(BodyKept::Whole);
    for (name, value) in pairs {
        let value = bytes(value);
        let text = String::from_utf8_lossy(&value);
        let number = || text.parse::<u64>().ok();
        match bytes(name).as_slice() {
            b"state" => state = RecordState::parse(&text),
            b"token" => record.token = Some(text.into_owned()),
            b"body_sha256" => record.body_sha256 = text.into_owned(),
            b"attempts" => record.attempts = number().unwrap_or(0) as u32,
            b"first_seen" => record.first_seen_ms = number().unwrap_or(0),
            b"lease_until" => record.lease_expires_at_ms = number(),
            b"completed_at" => record.completed_at_ms = number(),
            b"status" => status = number(),
            b"headers" => headers = value,
            b"body" => body = value,
            b"body_kept" => kept = BodyKept::parse(&text),
            _ => {}
        }
    }
    record.state = state.ok_or_else(|| StoreError::Corrupt("record has no valid state".into()))?;
    if record.state == RecordState::Completed {
        let status =
            status.ok_or_else(|| StoreError::Corrupt("completed record has no status".into()))?;
        let kept = kept.ok_or_else(|| StoreError::Corrupt("bad body_kept".into()))?;
        record.response = Some(
            RecordedResponse::decode(status as u16, &headers, body.into(), kept)
                .map_err(StoreError::Corrupt)?,
        );
    }
    Ok(record)
}
