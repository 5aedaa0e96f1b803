//! Copying records into and out of Redis (`hookgate store copy`): a
//! record's hash and its TTL read in one step, and written back — hash,
//! expiry, listing entry, due entry, replay guard — in one script; and a
//! record's content sealed again (`hookgate store reencrypt`) in one script
//! that leaves a changed record alone.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::fields::parse_record;
use super::prelude::script;
use super::{Connector, RedisStore};
use crate::store::{history, Content, Record, RecordState, StoreError, StoreKey, Transfer};

/// KEYS[1] the key; returns {expiry (Unix ms), PTTL, HGETALL}. The expiry
/// is Redis's own (`PEXPIRETIME`, 7.0 and later), so two reads of one
/// record agree to the millisecond; an older server's is `now` plus the
/// TTL, which a busy server can put a few milliseconds late (its TTL
/// counts from the script's start, `now` from when the prelude read it).
const EXPORT: &str = "
open_packed(KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
local at = redis.pcall('PEXPIRETIME', KEYS[1])
if type(at) ~= 'number' then at = now + ttl end
return {at, ttl, redis.call('HGETALL', KEYS[1])}";

/// KEYS[1] the key, optional KEYS[2] its body's replay guard; ARGV expiry
/// (Unix ms), source, id, updated, state, due score ('' none), owed score
/// ('' none), then the hash's field/value pairs. A live record changed at
/// or after `updated` is kept (0); otherwise the record replaces it with
/// its indexes (1) — a pending ordered record its place in its entity's
/// order too. The guard is set only when it points at no live key.
const IMPORT: &str = "
local expires = tonumber(ARGV[1])
if expires <= now then return 0 end
open_packed(KEYS[1])
local old = redis.call('HMGET', KEYS[1], 'state', 'updated', 'first_seen')
if old[1] then
  if (tonumber(old[2]) or tonumber(old[3]) or 0) >= tonumber(ARGV[4]) then return 0 end
  redis.call('ZREM', ARGV[2] .. '!' .. old[1], ARGV[3])
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('PEXPIREAT', KEYS[1], expires)
redis.call('ZADD', ARGV[2] .. '!' .. ARGV[5], ARGV[4], ARGV[3])
for i, set in ipairs({'due', 'accepted'}) do
  local score = ARGV[5 + i]
  if score ~= '' then redis.call('ZADD', ARGV[2] .. '!' .. set, score, ARGV[3])
  else redis.call('ZREM', ARGV[2] .. '!' .. set, ARGV[3]) end
end
local o = redis.call('HMGET', KEYS[1], 'entity', 'order_value', 'order_seq')
local pending = {queued = true, processing = true, failed = true, dead = true}
if o[1] and pending[ARGV[5]] then
  local seq = tonumber(o[3])
  redis.call('ZADD', ARGV[2] .. '!e:' .. o[1], o[2] or '-inf', place_of(ARGV[3], seq))
  redis.call('ZADD', ARGV[2] .. '!wake', now, o[1])
  if seq > (tonumber(redis.call('GET', ARGV[2] .. '!seq')) or 0) then
    redis.call('SET', ARGV[2] .. '!seq', seq)
  end
end
if KEYS[2] then
  local first = redis.call('GET', KEYS[2])
  if not first or redis.call('EXISTS', first) == 0 then
    redis.call('SET', KEYS[2], KEYS[1], 'PXAT', expires)
  end
end
return 1
";

/// KEYS[1] the key; ARGV[1..6] the content fields (in `CONTENT`'s order) as
/// read, ARGV[7..12] as written, each `-` when absent or `+` and its
/// value. Written (1) only while the hash holds exactly the first.
const RESEAL: &str = "
local names = {'req_query', 'req_headers', 'req_body', 'headers', 'body', 'history'}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
open_packed(KEYS[1])
for i, name in ipairs(names) do
  local held = redis.call('HGET', KEYS[1], name)
  if ARGV[i] == '-' then
    if held then return 0 end
  elseif held ~= string.sub(ARGV[i], 2) then
    return 0
  end
end
for i, name in ipairs(names) do
  local value = ARGV[6 + i]
  if value == '-' then redis.call('HDEL', KEYS[1], name)
  else redis.call('HSET', KEYS[1], name, string.sub(value, 2)) end
end
return 1
";

static EXPORT_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(EXPORT));
static IMPORT_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(IMPORT));
static RESEAL_SCRIPT: LazyLock<Script> = LazyLock::new(|| script(RESEAL));

impl<C: Connector> Transfer for RedisStore<C> {
    async fn export(&self, key: &StoreKey) -> Result<Option<(Record, u64)>, StoreError> {
        let invocation = EXPORT_SCRIPT.key(key.as_str());
        let reply: Vec<Value> = self.invoke(&invocation).await?;
        match reply.as_slice() {
            [_, Value::Int(ttl), _] if *ttl < 0 => Ok(None),
            [Value::Int(expires_at), Value::Int(_), fields] => {
                Ok(Some((parse_record(fields)?, *expires_at as u64)))
            }
            other => Err(StoreError::Corrupt(format!(
                "unexpected export reply {other:?}"
            ))),
        }
    }

    async fn import(
        &self,
        key: &StoreKey,
        record: &Record,
        expires_at_ms: u64,
        guard: Option<&StoreKey>,
    ) -> Result<bool, StoreError> {
        let mut invocation = IMPORT_SCRIPT.key(key.as_str());
        let apart = guard.filter(|_| self.guard_apart());
        if let Some(guard) = guard.filter(|_| apart.is_none()) {
            invocation.key(guard.as_str());
        }
        let waiting = matches!(record.state, RecordState::Queued | RecordState::Processing);
        let due = record.next_attempt_ms.filter(|_| waiting);
        // Owed to its queue since an attempt: what the oldest-queued gauge
        // reads (see scripts.rs).
        let owed =
            (record.accepted && waiting && record.attempts > 0).then_some(record.first_seen_ms);
        let score = |ms: Option<u64>| ms.map(|ms| ms.to_string()).unwrap_or_default();
        invocation
            .arg(expires_at_ms)
            .arg(key.source())
            .arg(key.id())
            .arg(record.updated_ms)
            .arg(record.state.as_str())
            .arg(score(due))
            .arg(score(owed));
        for (name, value) in fields(record) {
            invocation.arg(name).arg(value);
        }
        let written: i64 = self.invoke(&invocation).await?;
        if let (1, Some(guard)) = (written, apart) {
            self.import_guard(guard, key, expires_at_ms).await?;
        }
        Ok(written == 1)
    }

    async fn reseal(&self, key: &StoreKey, was: &Record, now: &Record) -> Result<bool, StoreError> {
        let mut invocation = RESEAL_SCRIPT.key(key.as_str());
        for record in [was, now] {
            for field in content_fields(record) {
                let mut arg = Vec::new();
                match field {
                    None => arg.push(b'-'),
                    Some(value) => {
                        arg.push(b'+');
                        arg.extend_from_slice(&value);
                    }
                }
                invocation.arg(arg);
            }
        }
        let written: i64 = self.invoke(&invocation).await?;
        Ok(written == 1)
    }
}

/// The hash's content fields of `record` (`RESEAL`'s order), as [`fields`]
/// writes them.
fn content_fields(record: &Record) -> [Option<Vec<u8>>; 6] {
    let content = Content::of(record);
    let query = (content.request_headers.is_some())
        .then(|| content.request_query.unwrap_or_default().into_bytes());
    [
        query,
        content.request_headers,
        content.request_body.map(|b| b.to_vec()),
        content.response_headers,
        content.response_body.map(|b| b.to_vec()),
        content.history.map(String::into_bytes),
    ]
}

/// The hash's fields of `record`, as `fields.rs` reads them back.
fn fields(record: &Record) -> Vec<(&'static str, Vec<u8>)> {
    let text = |value: &str| value.as_bytes().to_vec();
    let number = |value: u64| value.to_string().into_bytes();
    let mut fields = vec![
        ("state", text(record.state.as_str())),
        ("body_sha256", text(&record.body_sha256)),
        ("attempts", number(u64::from(record.attempts))),
        ("first_seen", number(record.first_seen_ms)),
        ("updated", number(record.updated_ms)),
    ];
    let mut optional = |name, value: Option<Vec<u8>>| {
        if let Some(value) = value {
            fields.push((name, value));
        }
    };
    optional("token", record.token.as_deref().map(text));
    optional("lease_until", record.lease_expires_at_ms.map(number));
    optional("completed_at", record.completed_at_ms.map(number));
    optional("next_attempt", record.next_attempt_ms.map(number));
    optional("accepted", record.accepted.then(|| text("1")));
    if let Some(response) = &record.response {
        optional("status", Some(number(u64::from(response.status.as_u16()))));
        optional("headers", Some(response.encode_headers()));
        optional("body", Some(response.body.to_vec()));
        optional("body_kept", Some(text(response.body_kept.as_str())));
    }
    if let Some(error) = &record.last_error {
        optional("last_error", Some(text(error.class.as_str())));
        optional("last_status", error.status.map(u64::from).map(number));
        optional("last_attempt_at", Some(number(error.at_ms)));
    }
    optional("route", record.route.as_deref().map(text));
    optional("replay_of", record.replay_of.as_deref().map(text));
    if let Some(request) = &record.request {
        optional("req_method", Some(text(request.method.as_str())));
        optional(
            "req_query",
            Some(text(request.query.as_deref().unwrap_or_default())),
        );
        optional("req_headers", Some(request.encode_headers()));
        optional("req_body", Some(request.body.to_vec()));
    }
    optional(
        "history",
        history::encode(&record.history).map(|h| text(&h)),
    );
    if let Some(order) = &record.order {
        optional("entity", Some(text(&order.entity)));
        optional("order_value", order.value.map(|v| text(&v.to_string())));
        optional("order_seq", Some(number(order.seq)));
    }
    fields
}
