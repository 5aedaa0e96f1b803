//! The Redis store's queue and listings: the due index a worker leases
//! from, and the per-state sorted sets listings, counts, the oldest-record
//! gauges and trims read (`prelude.rs` says how each script keeps them;
//! the listing and count scripts are here).

use std::time::Duration;

use redis::Value;

use super::fields::{bytes, parse_record};
use super::{backend, index_key, Connector, RedisStore};
use crate::order::Rules;
use crate::store::{
    Blocked, Due, Lease, Leased, ListQuery, Listing, Queue, Queued, Record, RecordState, StoreError,
};

/// The fields a listing reads (no request, no response body).
pub(super) const LISTED_FIELDS: &str =
    "'state', 'token', 'body_sha256', 'attempts', 'first_seen', 'updated', \
  'lease_until', 'completed_at', 'status', 'body_kept', 'last_error', 'last_status', \
  'last_attempt_at', 'route', 'replay_of'";

/// KEYS[1] the index of (source, state); ARGV source, state, limit, the
/// score to start below ('+inf', or ms), and '1' when the ids at exactly
/// that score are wanted too (the caller filters them by id). Returns
/// {tied, below}: flat lists of id, field pairs. Entries whose record has
/// expired or moved on are dropped from the index on the way.
pub(super) const LIST: &str = "
local idx, src, state, limit = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local FIELDS = {FIELDS}
local function fetch(id)
  local v = redis.call('HMGET', opened(src .. ':' .. id), unpack(FIELDS))
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
pub(super) const COUNT: &str = "
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, 9)) do
  if redis.call('HGET', opened(ARGV[1] .. ':' .. id), 'state') ~= ARGV[2] then
    redis.call('ZREM', KEYS[1], id)
  end
end
return redis.call('ZCARD', KEYS[1])
";

/// KEYS[1] the index of (source, queued); ARGV source, the most records
/// to sample, the bytes of an event's index entries. Returns {events,
/// bytes}: the sampled records' mean `MEMORY USAGE` (the hash with Redis's
/// own overhead) and the index entries, times the events.
pub(super) const QUEUED: &str = "
local n = redis.call('ZCARD', KEYS[1])
if n == 0 then return {0, 0} end
local seen, used = 0, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)) do
  local bytes = redis.call('MEMORY', 'USAGE', ARGV[1] .. ':' .. id, 'SAMPLES', 0)
  if bytes then seen = seen + 1; used = used + bytes end
end
if seen == 0 then return {n, 0} end
return {n, math.floor((used / seen + tonumber(ARGV[3])) * n)}
";

/// Queued records a `QUEUED` script samples for their size.
const QUEUED_SAMPLE: usize = 32;

/// An event's entries in its scope's indexes (due, state), in bytes —
/// measured: a queue of 2,000 events with 1 KB bodies grew `used_memory`
/// by 2.8 KB an event, of which its hash's `MEMORY USAGE` was 2.4 KB.
const QUEUED_INDEX_BYTES: u64 = 400;

/// The most dead events one `BLOCKED` script looks at: the oldest deaths.
const BLOCKED_LOOK_AT: usize = 10_000;

impl<C: Connector> Queue for RedisStore<C> {
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
        leased(&reply)
    }

    const ORDERED: bool = true;

    async fn lease_ordered(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        self.lease_in_order(source, tokens, processing_ttl, rules)
            .await
    }
}

impl<C: Connector> RedisStore<C> {
    /// [`Queue::lease_ordered`]: one `LEASE_ORDERED` script.
    pub(super) async fn lease_in_order(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        let mut invocation = self.lease_ordered.key(format!("{source}!due"));
        invocation
            .arg(source)
            .arg(processing_ttl.as_millis() as u64)
            .arg(if rules.skip_dead { "1" } else { "0" });
        for token in tokens {
            invocation.arg(token);
        }
        let mut connection = self.connector.connection().await?;
        let reply: (Vec<Value>, Vec<Value>) = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        let due = leased(&reply.0)?;
        let text = |value: &Value| String::from_utf8_lossy(&bytes(value)).into_owned();
        Ok(Leased {
            due,
            stale: reply.1.iter().map(text).collect(),
        })
    }
}

/// A lease script's reply: id, token and fields of each event leased.
fn leased(reply: &[Value]) -> Result<Vec<Due>, StoreError> {
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

impl<C: Connector> Listing for RedisStore<C> {
    async fn blocked(&self, source: &str, limit: usize) -> Result<Vec<Blocked>, StoreError> {
        let mut invocation = self.blocked.key(index_key(source, RecordState::Dead));
        invocation.arg(source).arg(limit).arg(BLOCKED_LOOK_AT);
        let mut connection = self.connector.connection().await?;
        let reply: Vec<Value> = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        let text = |value: &Value| String::from_utf8_lossy(&bytes(value)).into_owned();
        let number = |value: &Value| match value {
            Value::Int(n) => *n as u64,
            other => text(other).parse().unwrap_or(0),
        };
        Ok(reply
            .chunks_exact(4)
            .map(|held| Blocked {
                dead: text(&held[0]),
                entity: text(&held[1]),
                since_ms: number(&held[2]),
                waiting: number(&held[3]),
            })
            .collect())
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
        if state == RecordState::Queued {
            let mut invocation = self.oldest_owed.key(format!("{source}!accepted"));
            invocation.key(index_key(source, state)).arg(source);
            let oldest: Option<u64> = invocation
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            return Ok(oldest);
        }
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

    /// The events are the queued index's; the bytes are estimated from a
    /// sample of 32 records' `MEMORY USAGE`, plus their index entries
    /// (docs/operations/deploying.md, "Sizing").
    async fn queued(&self, source: &str) -> Result<Queued, StoreError> {
        let mut invocation = self.queued.key(index_key(source, RecordState::Queued));
        (invocation.arg(source).arg(QUEUED_SAMPLE)).arg(QUEUED_INDEX_BYTES);
        let mut connection = self.connector.connection().await?;
        let (events, bytes): (u64, u64) = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        Ok(Queued { events, bytes })
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
}
