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
    follow, settled, Backend, ClaimMode, ClaimOutcome, ClaimRequest, Deleted, Due, Failure,
    FailureClass, Invalidations, LastError, Lease, ListQuery, Record, RecordState, StoreError,
    StoreKey, StoredRequest,
};
use crate::replay::{BodyKept, RecordedResponse};

/// Shared by every script: the current Redis time in ms, and the listing
/// indexes. Each state of a source has one sorted set, `{source}!{state}`,
/// of event ids scored by their last change; a script that changes a
/// record's state moves its id in the same step (two sorted-set writes).
/// Entries whose record expired are dropped by listings as they meet them,
/// and in bulk by [`Backend::trim`] (the gateway's periodic sweep), so the
/// write path never looks for them. (The `!` keeps index keys out of the
/// event keys' `{source}:` namespace; on a cluster the source's hash tag
/// puts them in the records' slot.)
const PRELUDE: &str = "local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function index(src, id, from, to)
  if from and from ~= to then redis.call('ZREM', src .. '!' .. from, id) end
  redis.call('ZADD', src .. '!' .. to, now, id)
end
";

/// KEYS[1] key, optional KEYS[2] replay guard (checked whenever the key is
/// claimable, not only when it is new); ARGV token, body_sha256, lease ms,
/// retention ms, source, id, mode (0 deliver, 1 redeliver, 2 forced, 3
/// accept, 4 accept claimed), then a request to keep (route, replay_of,
/// method, query, headers, body; method '' keeps the one held).
///
/// The rules are `record.rs`'s `decide`, line by line. Returns {1,
/// attempts} when claimed (or accepted as new), {2} when the record was
/// queued (an acceptance of a record nobody holds, an operator making a
/// queued event due now), {3, ms} when an acceptance adopted a sync
/// holder's record (in flight for ms more), and {0, now, HGETALL...} of the
/// record that answers otherwise. An accepted record (`accepted`, or
/// `next_attempt` from before that field) stays owed to its queue: every
/// claim of it keeps it in the due index, `{source}!due`, scored by when a
/// worker takes it up.
const CLAIM: &str = "
local mode = ARGV[7]
local accepting = mode == '3' or mode == '4'
local operator = mode == '1' or mode == '2'
local due = ARGV[5] .. '!due'
local function answers(key)
  local s = redis.call('HMGET', key, 'state', 'lease_until')
  if not s[1] then return false end
  if s[1] == 'completed' or s[1] == 'dead' or s[1] == 'queued' then return true end
  return s[2] and tonumber(s[2]) > now
end
local function keep_request()
  if ARGV[10] ~= '' then
    redis.call('HSET', KEYS[1], 'route', ARGV[8], 'req_method', ARGV[10], 'req_query', ARGV[11],
      'req_headers', ARGV[12], 'req_body', ARGV[13])
    if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'replay_of', ARGV[9]) end
  end
end
local r = redis.call('HMGET', KEYS[1], 'state', 'attempts', 'lease_until', 'accepted', 'next_attempt')
local state = r[1]
local accepted = r[4] == '1' or r[5] ~= false
if state then
  local lease = r[3] and tonumber(r[3]) > now and tonumber(r[3])
  local answer = false
  if state == 'completed' then answer = mode ~= '2'
  elseif state == 'dead' then answer = not operator
  elseif state == 'queued' then
    if operator then
      redis.call('HSET', KEYS[1], 'next_attempt', now)
      redis.call('ZADD', due, now, ARGV[6])
      return {2}
    end
    answer = true
  elseif lease then
    if accepting and not accepted then
      redis.call('HSET', KEYS[1], 'accepted', '1', 'next_attempt', lease)
      redis.call('ZADD', due, lease, ARGV[6])
      keep_request()
      if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[4]) then
        redis.call('PEXPIRE', KEYS[1], ARGV[4])
      end
      if state == 'failed' then
        redis.call('HSET', KEYS[1], 'state', 'queued', 'updated', now)
        redis.call('HDEL', KEYS[1], 'token', 'lease_until')
        index(ARGV[5], ARGV[6], state, 'queued')
        return {2}
      end
      return {3, lease - now}
    end
    answer = true
  elseif accepting and accepted and state == 'processing' then answer = true
  elseif mode == '3' then
    redis.call('HSET', KEYS[1], 'state', 'queued', 'accepted', '1', 'body_sha256', ARGV[2],
      'updated', now, 'next_attempt', now)
    redis.call('HDEL', KEYS[1], 'token', 'lease_until')
    redis.call('ZADD', due, now, ARGV[6])
    keep_request()
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    index(ARGV[5], ARGV[6], state, 'queued')
    return {2}
  end
  if answer then return {0, now, redis.call('HGETALL', KEYS[1])} end
end
if KEYS[2] then
  local first = redis.call('GET', KEYS[2])
  if first and first ~= KEYS[1] and answers(first) then
    return {0, now, redis.call('HGETALL', first)}
  end
end
local attempts = (tonumber(r[2]) or 0) + 1
if not state then redis.call('HSET', KEYS[1], 'first_seen', now) end
if state == 'completed' then
  redis.call('HDEL', KEYS[1], 'completed_at', 'status', 'headers', 'body', 'body_kept')
end
local lease_until = now + tonumber(ARGV[3])
if mode == '3' then
  attempts = 0
  redis.call('HSET', KEYS[1], 'state', 'queued', 'body_sha256', ARGV[2], 'attempts', 0,
    'updated', now, 'next_attempt', now, 'accepted', '1')
  redis.call('ZADD', due, now, ARGV[6])
else
  redis.call('HSET', KEYS[1], 'state', 'processing', 'token', ARGV[1], 'body_sha256', ARGV[2],
    'attempts', attempts, 'lease_until', lease_until, 'updated', now)
  if mode == '4' or accepted then
    redis.call('HSET', KEYS[1], 'accepted', '1', 'next_attempt', lease_until)
    redis.call('ZADD', due, lease_until, ARGV[6])
  end
end
keep_request()
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if KEYS[2] then redis.call('SET', KEYS[2], KEYS[1], 'PX', ARGV[4]) end
index(ARGV[5], ARGV[6], state, mode == '3' and 'queued' or 'processing')
return {1, attempts}
";

/// KEYS[1] the due index of a source; ARGV source, lease ms, then one
/// token per event wanted. Leases each due event — queued, or processing
/// under a lapsed lease — to a token; returns flat {id, token, HGETALL…}.
/// Entries whose record is gone or no longer waiting leave the index.
const LEASE_DUE: &str = "
local src, lease = ARGV[1], tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, #ARGV - 2)
local out, n = {}, 0
for _, id in ipairs(ids) do
  local key = src .. ':' .. id
  local s = redis.call('HMGET', key, 'state', 'next_attempt', 'attempts')
  if (s[1] == 'queued' or s[1] == 'processing') and s[2] and tonumber(s[2]) <= now then
    n = n + 1
    local attempts = (tonumber(s[3]) or 0) + 1
    redis.call('HSET', key, 'state', 'processing', 'token', ARGV[2 + n],
      'lease_until', now + lease, 'next_attempt', now + lease, 'attempts', attempts,
      'updated', now)
    redis.call('ZADD', KEYS[1], now + lease, id)
    index(src, id, s[1], 'processing')
    out[#out + 1] = id
    out[#out + 1] = ARGV[2 + n]
    out[#out + 1] = redis.call('HGETALL', key)
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
";

/// KEYS[1] key; ARGV token, lease ms, source, id. An async event's next
/// look moves with its lease.
const RENEW: &str = "
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
local until_ = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lease_until', until_)
if redis.call('HEXISTS', KEYS[1], 'next_attempt') == 1 then
  redis.call('HSET', KEYS[1], 'next_attempt', until_)
  redis.call('ZADD', ARGV[3] .. '!due', until_, ARGV[4])
end
return 1
";

/// KEYS[1] key; ARGV token, status, headers, body, retention ms, body kept,
/// source, id.
const COMPLETE: &str = "
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
local from = redis.call('HGET', KEYS[1], 'state')
redis.call('HSET', KEYS[1], 'state', 'completed', 'completed_at', now, 'updated', now,
  'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4], 'body_kept', ARGV[6])
redis.call('HDEL', KEYS[1], 'token', 'lease_until')
if redis.call('HDEL', KEYS[1], 'next_attempt') == 1 then
  redis.call('ZREM', ARGV[7] .. '!due', ARGV[8])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
index(ARGV[7], ARGV[8], from, 'completed')
return 1
";

/// KEYS[1] key; ARGV token, a sync record\'s state (failed|dead), hold (1
/// keeps token and lease), error class, upstream status ('' none), route,
/// method, query, headers, body, retention ms, source, id, an accepted
/// record's retry ms ('' dead). Applies the future that fits the record's
/// duty; returns the state left, 0 when the token no longer holds it.
const FAIL: &str = "
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
local s = redis.call('HMGET', KEYS[1], 'state', 'accepted', 'next_attempt')
local from = s[1]
local accepted = s[2] == '1' or s[3] ~= false
local to, hold = ARGV[2], ARGV[3] == '1'
if accepted then
  hold = false
  if ARGV[14] ~= '' then to = 'queued' else to = 'dead' end
end
redis.call('HSET', KEYS[1], 'state', to, 'updated', now, 'last_error', ARGV[4],
  'last_attempt_at', now, 'route', ARGV[6], 'req_method', ARGV[7], 'req_query', ARGV[8],
  'req_headers', ARGV[9], 'req_body', ARGV[10])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'last_status', ARGV[5])
else redis.call('HDEL', KEYS[1], 'last_status') end
if not hold then redis.call('HDEL', KEYS[1], 'token', 'lease_until') end
if to == 'queued' then
  redis.call('HSET', KEYS[1], 'next_attempt', now + tonumber(ARGV[14]))
  redis.call('ZADD', ARGV[12] .. '!due', now + tonumber(ARGV[14]), ARGV[13])
elseif redis.call('HDEL', KEYS[1], 'next_attempt') == 1 then
  redis.call('ZREM', ARGV[12] .. '!due', ARGV[13])
end
redis.call('PEXPIRE', KEYS[1], ARGV[11])
index(ARGV[12], ARGV[13], from, to)
return to
";

/// KEYS[1] key; ARGV token, source, id. A released accepted event goes
/// back to its queue, due now.
const RELEASE: &str = "
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
local async = redis.call('HEXISTS', KEYS[1], 'next_attempt') == 1
  or redis.call('HGET', KEYS[1], 'accepted') == '1'
if redis.call('HGET', KEYS[1], 'state') == 'processing' then
  local to = async and 'queued' or 'failed'
  redis.call('HSET', KEYS[1], 'state', to, 'updated', now)
  index(ARGV[2], ARGV[3], 'processing', to)
end
if async then
  redis.call('HSET', KEYS[1], 'next_attempt', now)
  redis.call('ZADD', ARGV[2] .. '!due', now, ARGV[3])
end
redis.call('HDEL', KEYS[1], 'token', 'lease_until')
return 1
";

/// KEYS[1] key; ARGV force ('1' or '0'), source, id. Returns 1 deleted,
/// 2 in flight (a live lease, or queued: its queue owes it a delivery), 0
/// not found.
const DELETE: &str = "
local s = redis.call('HMGET', KEYS[1], 'state', 'lease_until')
if not s[1] then return 0 end
if ARGV[1] ~= '1' and (s[1] == 'queued' or (s[2] and tonumber(s[2]) > now)) then return 2 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', ARGV[2] .. '!' .. s[1], ARGV[3])
redis.call('ZREM', ARGV[2] .. '!due', ARGV[3])
return 1
";

/// The fields a listing reads (no request, no response body).
const LISTED_FIELDS: &str =
    "'state', 'token', 'body_sha256', 'attempts', 'first_seen', 'updated', \
  'lease_until', 'completed_at', 'status', 'body_kept', 'last_error', 'last_status', \
  'last_attempt_at', 'route', 'replay_of'";

/// KEYS[1] the index of (source, state); ARGV source, state, limit, the
/// score to start below ('+inf', or ms), and '1' when the ids at exactly
/// that score are wanted too (the caller filters them by id). Returns
/// {tied, below}: flat lists of id, field pairs. Entries whose record has
/// expired or moved on are dropped from the index on the way.
const LIST: &str = "
local idx, src, state, limit = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local FIELDS = {FIELDS}
local function fetch(id)
  local v = redis.call('HMGET', src .. ':' .. id, unpack(FIELDS))
  if v[1] ~= state then redis.call('ZREM', idx, id) return nil end
  local out = {}
  for i, name in ipairs(FIELDS) do
    if v[i] then out[#out + 1] = name; out[#out + 1] = v[i] end
  end
  return out
end
local tied, below, max = {}, {}, ARGV[4]
if ARGV[5] == '1' then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', idx, max, max)) do
    local f = fetch(id)
    if f then tied[#tied + 1] = id; tied[#tied + 1] = f end
  end
  max = '(' .. max
end
local offset = 0
while #below < 2 * limit do
  local ids = redis.call('ZREVRANGEBYSCORE', idx, max, '-inf', 'LIMIT', offset, limit)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    local f = fetch(id)
    if f then
      offset = offset + 1
      if #below < 2 * limit then below[#below + 1] = id; below[#below + 1] = f end
    end
  end
end
return {tied, below}
";

/// KEYS[1] the index of (source, state); ARGV source, state. Retires up to
/// ten stale entries at the old end, then counts.
const COUNT: &str = "
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, 9)) do
  if redis.call('HGET', ARGV[1] .. ':' .. id, 'state') ~= ARGV[2] then
    redis.call('ZREM', KEYS[1], id)
  end
end
return redis.call('ZCARD', KEYS[1])
";

/// KEYS[1] `{prefix}readyz`: the readiness probe (see `ping`).
const PROBE: &str = "
redis.call('HSET', KEYS[1], 'at', now)
redis.call('PEXPIRE', KEYS[1], 60000)
return tonumber(redis.call('HGET', KEYS[1], 'at'))
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
    fail: Script,
    lease_due: Script,
    release: Script,
    delete: Script,
    list: Script,
    count: Script,
    probe: Script,
}

impl<C: Connector> RedisStore<C> {
    fn with(connector: C, timeout: Duration, min_replicas_acked: u32) -> Self {
        let script = |body: &str| Script::new(&format!("{PRELUDE}{body}"));
        Self {
            connector,
            min_replicas_acked,
            wait_timeout: timeout / 2,
            claim: script(CLAIM),
            renew: script(RENEW),
            complete: script(COMPLETE),
            fail: script(FAIL),
            lease_due: script(LEASE_DUE),
            release: script(RELEASE),
            delete: script(DELETE),
            list: script(&LIST.replace("{FIELDS}", &format!("{{{LISTED_FIELDS}}}"))),
            count: script(COUNT),
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
        match reply.as_slice() {
            [Value::Int(1), _] if request.mode == ClaimMode::Accept => Ok(ClaimOutcome::Queued),
            [Value::Int(2)] => Ok(ClaimOutcome::Queued),
            [Value::Int(3), Value::Int(ms)] => Ok(ClaimOutcome::InFlight {
                retry_after: Duration::from_millis(*ms as u64).max(Duration::from_secs(1)),
            }),
            [Value::Int(1), Value::Int(attempts)] => Ok(ClaimOutcome::New(Lease {
                token,
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
            .arg(key.id());
        let key = key.as_str();
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
            );
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

    async fn lease_due(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
    ) -> Result<Vec<Due>, StoreError> {
        let mut invocation = self.lease_due.key(format!("{source}!due"));
        invocation
            .arg(source)
            .arg(processing_ttl.as_millis() as u64);
        for token in tokens {
            invocation.arg(token);
        }
        let mut connection = self.connector.connection().await?;
        let reply: Vec<Value> = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        reply
            .chunks_exact(3)
            .map(|leased| {
                let record = parse_record(&leased[2])?;
                Ok(Due {
                    id: String::from_utf8_lossy(&bytes(&leased[0])).into_owned(),
                    lease: Lease {
                        token: String::from_utf8_lossy(&bytes(&leased[1])).into_owned(),
                        attempt: record.attempts,
                    },
                    record,
                })
            })
            .collect()
    }

    async fn list(&self, query: &ListQuery<'_>) -> Result<Vec<(String, Record)>, StoreError> {
        let mut invocation = self.list.key(index_key(query.source, query.state));
        invocation
            .arg(query.source)
            .arg(query.state.as_str())
            .arg(query.limit.max(1));
        match query.before {
            Some((ms, _)) => invocation.arg(ms).arg("1"),
            None => invocation.arg("+inf").arg("0"),
        };
        let mut connection = self.connector.connection().await?;
        let (tied, below): (Vec<Value>, Vec<Value>) = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        let mut page = Vec::new();
        for (listed, filter) in [(tied, true), (below, false)] {
            for pair in listed.chunks_exact(2) {
                let id = String::from_utf8_lossy(&bytes(&pair[0])).into_owned();
                let record = parse_record(&pair[1])?;
                if !filter || query.admits(record.updated_ms, &id) {
                    page.push((id, record));
                }
            }
        }
        page.sort_by(|(a_id, a), (b_id, b)| (b.updated_ms, b_id).cmp(&(a.updated_ms, a_id)));
        page.truncate(query.limit);
        Ok(page)
    }

    async fn trim(
        &self,
        source: &str,
        state: RecordState,
        before_ms: u64,
    ) -> Result<u64, StoreError> {
        let mut connection = self.connector.connection().await?;
        redis::cmd("ZREMRANGEBYSCORE")
            .arg(index_key(source, state))
            .arg("-inf")
            .arg(format!("({before_ms}"))
            .query_async(&mut connection)
            .await
            .map_err(backend)
    }

    /// The oldest entry of the state's listing index (an entry whose record
    /// just expired may stand in for it until the next trim).
    async fn oldest(&self, source: &str, state: RecordState) -> Result<Option<u64>, StoreError> {
        let mut connection = self.connector.connection().await?;
        let oldest: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(index_key(source, state))
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(oldest.first().map(|(_, at)| *at as u64))
    }

    async fn count(&self, source: &str, state: RecordState) -> Result<u64, StoreError> {
        let mut invocation = self.count.key(index_key(source, state));
        invocation.arg(source).arg(state.as_str());
        let mut connection = self.connector.connection().await?;
        invocation
            .invoke_async(&mut connection)
            .await
            .map_err(backend)
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
        let Some(clients) = self.connector.pubsub() else {
            return Invalidations::Unsupported;
        };
        Invalidations::Feed(Box::new(move |channel, cache| {
            let mut next = 0;
            follow(&cache, move || {
                let client = clients[next % clients.len()].clone();
                next += 1;
                let channel = channel.clone();
                async move {
                    let mut pubsub = client.get_async_pubsub().await.ok()?;
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

    async fn ping(&self, space: &str) -> Result<(), StoreError> {
        let mut connection = self.connector.connection().await?;
        self.probe
            .key(format!("{space}readyz"))
            .invoke_async::<i64>(&mut connection)
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

/// The listing index of `source`'s records in `state`.
fn index_key(source: &str, state: RecordState) -> String {
    format!("{source}!{}", state.as_str())
}

fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        Value::Int(n) => n.to_string().into_bytes(),
        _ => Vec::new(),
    }
}

/// Turn an `HGETALL` reply (RESP2 flat array or RESP3 map) into a record.
fn parse_record(fields: &Value) -> Result<Record, StoreError> {
    let pairs: Vec<(&Value, &Value)> = match fields {
        Value::Array(items) => items.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        Value::Map(items) => items.iter().map(|(k, v)| (k, v)).collect(),
        other => return Err(StoreError::Corrupt(format!("record is {other:?}"))),
    };
    let mut state = None;
    let mut record = Record::claimed("", "", 0, 0);
    record.token = None;
    let (mut status, mut headers, mut body) = (None, Vec::new(), None);
    let (mut error_class, mut error_status, mut error_at) = (None, None, 0);
    let (mut method, mut query, mut request_headers, mut request_body) =
        (None, None, Vec::new(), None);
    let mut updated = None;
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
            b"updated" => updated = number(),
            b"lease_until" => record.lease_expires_at_ms = number(),
            b"completed_at" => record.completed_at_ms = number(),
            b"next_attempt" => {
                record.next_attempt_ms = number();
                // Queued before records said so: an accepted record.
                record.accepted = true;
            }
            b"accepted" => record.accepted = true,
            b"status" => status = number(),
            b"headers" => headers = value,
            b"body" => body = Some(value),
            b"body_kept" => kept = BodyKept::parse(&text),
            b"last_error" => {
                error_class = Some(
                    FailureClass::parse(&text)
                        .ok_or_else(|| StoreError::Corrupt(format!("bad last_error {text:?}")))?,
                )
            }
            b"last_status" => error_status = number().map(|n| n as u16),
            b"last_attempt_at" => error_at = number().unwrap_or(0),
            b"route" => record.route = Some(text.into_owned()),
            b"replay_of" => record.replay_of = Some(text.into_owned()),
            b"req_method" => method = Some(text.into_owned()),
            b"req_query" => query = Some(text.into_owned()).filter(|q| !q.is_empty()),
            b"req_headers" => request_headers = value,
            b"req_body" => request_body = Some(value),
            _ => {}
        }
    }
    record.state = state.ok_or_else(|| StoreError::Corrupt("record has no valid state".into()))?;
    record.updated_ms = updated.unwrap_or(record.first_seen_ms);
    record.last_error = error_class.map(|class| LastError {
        class,
        status: error_status,
        at_ms: error_at,
    });
    if let (RecordState::Completed, Some(body)) = (record.state, body) {
        let status =
            status.ok_or_else(|| StoreError::Corrupt("completed record has no status".into()))?;
        let kept = kept.ok_or_else(|| StoreError::Corrupt("bad body_kept".into()))?;
        record.response = Some(
            RecordedResponse::decode(status as u16, &headers, body.into(), kept)
                .map_err(StoreError::Corrupt)?,
        );
    }
    if let (Some(method), Some(body)) = (method, request_body) {
        record.request = Some(
            StoredRequest::decode(&method, query, &request_headers, body.into())
                .map_err(StoreError::Corrupt)?,
        );
    }
    Ok(record)
}
