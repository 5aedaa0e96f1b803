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
//! Connection: the redis crate's `ConnectionManager` — one multiplexed
//! connection that pipelines every concurrent request (no pool checkout, no
//! per-request connection) and reconnects by itself in the background after
//! Redis comes back. Scripts are sent with `EVALSHA` and reloaded on
//! `NOSCRIPT` (after a Redis restart) by `redis::Script`.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};

use super::{
    new_token, retry_after, ClaimOutcome, ClaimRequest, Lease, Record, RecordState, StoreError,
};
use crate::replay::RecordedResponse;

/// The current Redis time in ms, shared by every script.
const NOW: &str = "local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// KEYS[1] key, optional KEYS[2] replay guard; ARGV token, body_sha256,
/// lease ms, retention ms. Returns {1, attempts} when claimed,
/// {0, now, HGETALL...} of the record that answers otherwise.
const CLAIM: &str = "
local function settled(key)
  local s = redis.call('HMGET', key, 'state', 'lease_until')
  return s[1] == 'completed' or (s[1] == 'processing' and tonumber(s[2]) > now)
end
if settled(KEYS[1]) then return {0, now, redis.call('HGETALL', KEYS[1])} end
local r = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if not r[1] and KEYS[2] then
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

/// KEYS[1] key; ARGV token, status, headers, body, retention ms.
const COMPLETE: &str = "
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'completed_at', now,
  'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4])
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

pub struct RedisStore {
    connection: ConnectionManager,
    claim: Script,
    renew: Script,
    complete: Script,
    release: Script,
}

impl RedisStore {
    /// Prepare a lazily connecting store for `url`.
    pub fn connect(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(backend)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            // Reconnect attempts happen in the background between requests;
            // keep each short so a returning Redis is picked up quickly.
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let connection =
            ConnectionManager::new_lazy_with_config(client, config).map_err(backend)?;
        let script = |body: &str| Script::new(&format!("{NOW}{body}"));
        Ok(Self {
            connection,
            claim: script(CLAIM),
            renew: script(RENEW),
            complete: script(COMPLETE),
            release: script(RELEASE),
        })
    }

    pub async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let token = new_token();
        let mut invocation = self.claim.key(request.key);
        if let Some(guard) = request.guard_key {
            invocation.key(guard);
        }
        let reply: Vec<Value> = invocation
            .arg(&token)
            .arg(request.body_sha256)
            .arg(request.lease.as_millis() as u64)
            .arg(request.retention.as_millis() as u64)
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        match reply.as_slice() {
            [Value::Int(1), Value::Int(attempts)] => Ok(ClaimOutcome::New(Lease {
                token,
                attempt: *attempts as u32,
            })),
            [Value::Int(0), Value::Int(now), fields] => {
                let record = parse_record(fields)?;
                match record.state {
                    RecordState::Completed => Ok(ClaimOutcome::Completed(record)),
                    _ => Ok(ClaimOutcome::InFlight {
                        retry_after: retry_after(record.lease_until_ms.unwrap_or(0), *now as u64),
                    }),
                }
            }
            other => Err(StoreError::Corrupt(format!(
                "unexpected claim reply {other:?}"
            ))),
        }
    }

    pub async fn renew(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, StoreError> {
        let mut invocation = self.renew.key(key);
        invocation.arg(token).arg(ttl.as_millis() as u64);
        self.applied(&invocation).await
    }

    pub async fn complete(
        &self,
        key: &str,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let mut invocation = self.complete.key(key);
        invocation
            .arg(token)
            .arg(response.status.as_u16())
            .arg(response.encode_headers())
            .arg(response.body.as_ref())
            .arg(retention.as_millis() as u64);
        self.applied(&invocation).await
    }

    pub async fn release(&self, key: &str, token: &str) -> Result<bool, StoreError> {
        let mut invocation = self.release.key(key);
        invocation.arg(token);
        self.applied(&invocation).await
    }

    /// Run a compare-and-set script: 1 when the token matched.
    async fn applied(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<bool, StoreError> {
        let applied: i64 = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        Ok(applied == 1)
    }

    pub async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        let fields: Value = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        match &fields {
            Value::Array(items) if items.is_empty() => Ok(None),
            Value::Map(items) if items.is_empty() => Ok(None),
            _ => parse_record(&fields).map(Some),
        }
    }

    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let removed: i64 = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut self.connection.clone())
            .await
            .map_err(backend)?;
        Ok(removed == 1)
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.connection.clone())
            .await
            .map(drop)
            .map_err(backend)
    }
}

impl RedisStore {
    /// Redis settings that would silently lose claims: eviction (a claim or
    /// recording evicted under memory pressure is a forgotten event) and, for
    /// retentions over a day, no persistence (a Redis restart forgets
    /// everything). `CONFIG` may be refused on managed Redis; then nothing is
    /// reported.
    pub async fn risks(&self, longest_retention: Duration) -> Vec<String> {
        let mut risks = Vec::new();
        let connection = self.connection.clone();
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
        lease_until_ms: None,
        completed_at_ms: None,
        response: None,
    };
    let (mut status, mut headers, mut body) = (None, Vec::new(), Vec::new());
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
            b"lease_until" => record.lease_until_ms = number(),
            b"completed_at" => record.completed_at_ms = number(),
            b"status" => status = number(),
            b"headers" => headers = value,
            b"body" => body = value,
            _ => {}
        }
    }
    record.state = state.ok_or_else(|| StoreError::Corrupt("record has no valid state".into()))?;
    if record.state == RecordState::Completed {
        let status =
            status.ok_or_else(|| StoreError::Corrupt("completed record has no status".into()))?;
        record.response = Some(
            RecordedResponse::decode(status as u16, &headers, body.into())
                .map_err(StoreError::Corrupt)?,
        );
    }
    Ok(record)
}
