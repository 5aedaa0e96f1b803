//! What every Redis script starts with, and how a script is built from
//! its body: `now` (Redis's clock, or the gateway's reading of it), the
//! listing and ordering helpers, and the opening of a packed record
//! (`packed.rs`) into the hash every script reads. The scripts themselves,
//! one per operation, are `scripts.rs`'s.

use redis::Script;

/// A script: `now` read from Redis's clock, then [`PRELUDE`], then
/// [`OPEN_PACKED`], then `body`.
pub(super) fn script(body: &str) -> Script {
    Script::new(&format!(
        "{REDIS_CLOCK}local now = redis_now()\n{PRELUDE}{OPEN_PACKED}{body}"
    ))
}

/// A script whose `now` is its last argument: Redis's time as the gateway
/// last read it (`packed.rs`), for a script on every event's path that
/// only stamps a record with it — no lease is judged by it. `TIME` inside
/// a script costs more than the rest of a small one (BENCHMARKS.md, "Redis
/// CPU per event"); `redis_now()` reads the clock where a path needs it.
pub(super) fn script_stamped(body: &str) -> Script {
    Script::new(&format!(
        "{REDIS_CLOCK}local now = tonumber(ARGV[#ARGV])\n{PRELUDE}{OPEN_PACKED}{body}"
    ))
}

/// `redis_now()`: Redis's time in ms.
const REDIS_CLOCK: &str = "local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
";

/// Lua, after the prelude: `open_packed(key)` turns a packed record
/// (`packed.rs`) at `key` into its hash, in place, keeping its expiry: a
/// packed claim (`p1:`) is listed as it is opened, a packed completion
/// (`p2:`) was listed when it was written. Any other value is left as it
/// is. `opened(key)` does that and returns the key.
pub(super) const OPEN_PACKED: &str = "
local function open_packed(key)
  if redis.call('TYPE', key)['ok'] ~= 'string' then return end
  local value = redis.call('GET', key)
  local token, sha, lease_until, n = string.match(value, '^p1:([^:]*):([^:]*):(%d+):(%d+)$')
  if token then
    local ttl = redis.call('PTTL', key)
    redis.call('DEL', key)
    redis.call('HSET', key, 'state', 'processing', 'token', token, 'body_sha256', sha,
      'attempts', 1, 'lease_until', lease_until, 'updated', now, 'first_seen', now)
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    n = tonumber(n)
    index(string.sub(key, 1, n), string.sub(key, n + 2), nil, 'processing')
    return
  end
  local status, kept, attempts, first, at, body_sha, length, from =
    string.match(value, '^p2:(%d+):(%a+):(%d+):(%d+):(%d+):([^:]*):(%d+):()')
  if not status then return end
  local ttl = redis.call('PTTL', key)
  local split = from + tonumber(length)
  redis.call('DEL', key)
  redis.call('HSET', key, 'state', 'completed', 'completed_at', at, 'updated', at,
    'status', status, 'headers', string.sub(value, from, split - 1),
    'body', string.sub(value, split), 'body_kept', kept, 'body_sha256', body_sha,
    'attempts', attempts, 'first_seen', first)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
local function opened(key)
  open_packed(key)
  return key
end
";

/// Shared by every script, after `now`: the listing
/// indexes, and an ordered record's entity (`ordered`: the record left its
/// entity's pending set (1), delivered (2, its value the entity's newest if
/// newer), or changed (0); each wakes the entity, see `LEASE_ORDERED` in `scripts.rs`). Each state of a source has one sorted set, `{source}!{state}`,
/// of event ids scored by their last change; a script that changes a
/// record's state moves its id in the same step (two sorted-set writes).
/// Entries whose record expired are dropped by listings as they meet them,
/// and in bulk by [`Listing::trim`](super::super::Listing::trim) (the gateway's periodic sweep), so the
/// write path never looks for them. (The `!` keeps index keys out of the
/// event keys' `{source}:` namespace; on a cluster the source's hash tag
/// puts them in the records' slot.) `{source}!accepted` holds the accepted
/// events that went back to their queue after an attempt — a failure, a
/// release — scored by when they were first seen, for
/// `hookgate_oldest_queued_seconds` (`owe` adds one; its completion, dead
/// letter or deletion removes it). An event queued and never tried needs
/// no entry: its `{source}!queued` score is its acceptance. So the success
/// path pays nothing for the gauge but one `ZREM` of an async completion
/// (of an id the set rarely holds, or of a set that does not exist).
pub(super) const PRELUDE: &str = "local function index(src, id, from, to)
  if from and from ~= to then redis.call('ZREM', src .. '!' .. from, id) end
  redis.call('ZADD', src .. '!' .. to, now, id)
end
local function owe(src, id, key)
  local seen = tonumber(redis.call('HGET', key, 'first_seen')) or now
  redis.call('ZADD', src .. '!accepted', 'NX', seen, id)
end
local function place_of(id, seq) return string.format('%020d', seq) .. ':' .. id end
-- An entity's `{source}!E:` hash lives as long as the longest-lived of
-- its events written to it: the stale guard remembers the newest value
-- delivered for the record's retention, as the SQL stores do.
local function entity_lives(meta, key)
  local ttl = redis.call('PTTL', key)
  if ttl > redis.call('PTTL', meta) then redis.call('PEXPIRE', meta, ttl) end
end
local function ordered(src, id, key, how)
  local o = redis.call('HMGET', key, 'entity', 'order_value', 'order_seq')
  if not o[1] then return end
  if how > 0 then redis.call('ZREM', src .. '!e:' .. o[1], place_of(id, tonumber(o[3]))) end
  if how == 2 and o[2] then
    local meta = src .. '!E:' .. o[1]
    local newest = tonumber(redis.call('HGET', meta, 'newest'))
    if not newest or tonumber(o[2]) > newest then redis.call('HSET', meta, 'newest', o[2]) end
    entity_lives(meta, key)
  end
  redis.call('ZADD', src .. '!wake', now, o[1])
end
";
