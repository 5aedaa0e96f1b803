//! The Redis store's Lua scripts, one per operation, each one atomic step
//! on the record, its listing index and its queue's due index. The claim
//! script is the record's life (`store/record.rs`, `decide`) in Lua. Each
//! runs after what every script starts with (`prelude.rs`).

/// KEYS[1] key, optional KEYS[2] replay guard (checked whenever the key is
/// claimable, not only when it is new); ARGV token, body_sha256, lease ms,
/// retention ms, source, id, mode (0 deliver, 1 redeliver, 2 forced, 3
/// accept, 4 accept claimed), then a request to keep (route, replay_of,
/// method, query, headers, body; method '' keeps the one held), then the
/// guard token this claim took (`guard_token`, '' none) and '1' to stop
/// where the guard would be checked, answering {4} (a guard in another
/// slot, `guard.rs`), then an ordered acceptance's entity, value and hold
/// in ms ('' none): its place, the next of the source's sequence, once.
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
pub(super) const CLAIM: &str = "
local mode = ARGV[7]
local accepting = mode == '3' or mode == '4'
local operator = mode == '1' or mode == '2'
local due = ARGV[5] .. '!due'
local function answers(key)
  open_packed(key)
  local s = redis.call('HMGET', key, 'state', 'lease_until')
  if not s[1] then return false end
  if s[1] == 'completed' or s[1] == 'dead' or s[1] == 'stale' or s[1] == 'queued' then
    return true
  end
  return s[2] and tonumber(s[2]) > now
end
local function place()
  if ARGV[16] == '' or redis.call('HEXISTS', KEYS[1], 'entity') == 1 then return end
  local seq = redis.call('INCR', ARGV[5] .. '!seq')
  local score = '-inf'
  redis.call('HSET', KEYS[1], 'entity', ARGV[16], 'order_seq', seq)
  if ARGV[17] ~= '' then
    redis.call('HSET', KEYS[1], 'order_value', ARGV[17])
    score = ARGV[17]
  end
  local entity = ARGV[5] .. '!e:' .. ARGV[16]
  redis.call('ZADD', entity, score, place_of(ARGV[6], seq))
  redis.call('PEXPIRE', entity, ARGV[4])
  local at = now + tonumber(ARGV[18])
  redis.call('HSET', KEYS[1], 'next_attempt', at)
  redis.call('ZADD', due, at, ARGV[6])
end
local function keep_request()
  if ARGV[10] ~= '' then
    redis.call('HSET', KEYS[1], 'route', ARGV[8], 'req_method', ARGV[10], 'req_query', ARGV[11],
      'req_headers', ARGV[12], 'req_body', ARGV[13])
    if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'replay_of', ARGV[9]) end
  end
end
open_packed(KEYS[1])
local r = redis.call('HMGET', KEYS[1], 'state', 'attempts', 'lease_until', 'accepted', 'next_attempt')
local state = r[1]
local accepted = r[4] == '1' or r[5] ~= false
if state then
  local lease = r[3] and tonumber(r[3]) > now and tonumber(r[3])
  local answer = false
  if state == 'completed' then answer = mode ~= '2'
  elseif state == 'dead' or state == 'stale' then answer = not operator
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
    place()
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    index(ARGV[5], ARGV[6], state, 'queued')
    return {2}
  end
  if answer then return {0, now, redis.call('HGETALL', KEYS[1])} end
end
if ARGV[15] == '1' then return {4} end
if KEYS[2] then
  local first = redis.call('GET', KEYS[2])
  if first and first ~= KEYS[1] and answers(first) then
    return {0, now, redis.call('HGETALL', first)}
  end
end
local attempts = (tonumber(r[2]) or 0) + 1
local seen = {}
if not state then seen = {'first_seen', now} end
if state == 'completed' then
  redis.call('HDEL', KEYS[1], 'completed_at', 'status', 'headers', 'body', 'body_kept')
end
local lease_until = now + tonumber(ARGV[3])
if mode == '3' then
  attempts = 0
  redis.call('HSET', KEYS[1], 'state', 'queued', 'body_sha256', ARGV[2], 'attempts', 0,
    'updated', now, 'next_attempt', now, 'accepted', '1', unpack(seen))
  redis.call('ZADD', due, now, ARGV[6])
else
  redis.call('HSET', KEYS[1], 'state', 'processing', 'token', ARGV[1], 'body_sha256', ARGV[2],
    'attempts', attempts, 'lease_until', lease_until, 'updated', now, unpack(seen))
  if mode == '4' or accepted then
    redis.call('HSET', KEYS[1], 'accepted', '1', 'next_attempt', lease_until)
    redis.call('ZADD', due, lease_until, ARGV[6])
  end
end
keep_request()
if mode == '3' then place() end
if operator then
  local entity = redis.call('HGET', KEYS[1], 'entity')
  if entity then
    redis.call('HSET', ARGV[5] .. '!E:' .. entity, 'busy', ARGV[6])
    entity_lives(ARGV[5] .. '!E:' .. entity, KEYS[1])
  end
end
if ARGV[14] ~= '' then redis.call('HSET', KEYS[1], 'guard_token', ARGV[14]) end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if KEYS[2] then redis.call('SET', KEYS[2], KEYS[1], 'PX', ARGV[4]) end
index(ARGV[5], ARGV[6], state, mode == '3' and 'queued' or 'processing')
return {1, attempts}
";

/// KEYS[1] the due index of a source; ARGV source, lease ms, then one
/// token per event wanted. Leases each due event — queued, or processing
/// under a lapsed lease — to a token; returns flat {id, token, HGETALL…}.
/// Entries whose record is gone or no longer waiting leave the index.
pub(super) const LEASE_DUE: &str = "
local src, lease = ARGV[1], tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, #ARGV - 2)
local out, n = {}, 0
for _, id in ipairs(ids) do
  local key = opened(src .. ':' .. id)
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

/// KEYS[1] the due index of a source; ARGV source, lease ms, '1' when a
/// dead event no longer holds its entity (`on_blocked = "skip"`), then one
/// token per event wanted. As `LEASE_DUE`, keeping each entity's order
/// (docs/guide/ordering.md, "Ordered delivery"): an ordered event is leased only as its
/// entity's head — the first of `{source}!e:{entity}`, its pending events
/// scored by `stale_by` value (none: `-inf`) and tied by their place in
/// the source's sequence — while nothing of the entity is in flight
/// (`{source}!E:{entity}` keeps the one last leased, `busy`, and the newest
/// value delivered). Events met that are not their entity's head leave the
/// due index; the entity is woken (`{source}!wake`) when its head may have
/// changed — by a script that settles one of its events, or at its head's
/// own next look — and a woken entity's head goes back in the due index.
/// A head older than the newest delivered turns `stale`. Returns {leased
/// (as `LEASE_DUE`), stale ids}.
pub(super) const LEASE_ORDERED: &str = "
local due, src, lease, skip = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local out, stale, n, wanted = {}, {}, 0, #ARGV - 3
local function record(id) return opened(src .. ':' .. id) end
-- The entity's head: its id, state and next look; nil with when to look
-- again (nil: when woken) while it is in flight, held by a dead event or
-- empty. Settled events met on the way leave the pending set.
local function head(entity)
  local meta = src .. '!E:' .. entity
  local busy = redis.call('HGET', meta, 'busy')
  if busy then
    local b = redis.call('HMGET', record(busy), 'state', 'lease_until')
    if b[1] == 'processing' and b[2] and tonumber(b[2]) > now then
      return nil, nil, tonumber(b[2])
    end
    redis.call('HDEL', meta, 'busy')
  end
  local pending = src .. '!e:' .. entity
  while true do
    local first = redis.call('ZRANGE', pending, 0, 0)[1]
    if not first then return nil end
    local id = string.sub(first, 22)
    local r = redis.call('HMGET', record(id), 'state', 'next_attempt')
    if r[1] == 'queued' or r[1] == 'processing' then return id, r[1], tonumber(r[2]) end
    if r[1] == 'dead' and not skip then return nil end
    if r[1] == 'failed' then return nil end
    redis.call('ZREM', pending, first)
  end
end
local function take(id, key, from, attempts)
  n = n + 1
  redis.call('HSET', key, 'state', 'processing', 'token', ARGV[3 + n],
    'lease_until', now + lease, 'next_attempt', now + lease, 'attempts', (tonumber(attempts) or 0) + 1,
    'updated', now)
  redis.call('ZADD', due, now + lease, id)
  index(src, id, from, 'processing')
  out[#out + 1] = id
  out[#out + 1] = ARGV[3 + n]
  out[#out + 1] = redis.call('HGETALL', key)
end
-- An entity's turn: its stale heads turn stale, then its head is leased
-- (when due and wanted) or goes (back) in the due index at its next look;
-- with no head to place, the entity waits to be woken (at its busy
-- event's lease end, if one is in flight).
local placed = {}
local function turn(entity)
  while true do
    local id, state, at = head(entity)
    if not id then
      if at then redis.call('ZADD', src .. '!wake', at, entity) end
      return
    end
    local key = record(id)
    local s = redis.call('HMGET', key, 'order_value', 'attempts')
    local newest = tonumber(redis.call('HGET', src .. '!E:' .. entity, 'newest'))
    placed[id] = true
    if s[1] and newest and tonumber(s[1]) < newest then
      redis.call('HSET', key, 'state', 'stale', 'updated', now)
      redis.call('HDEL', key, 'token', 'lease_until', 'next_attempt')
      redis.call('ZREM', due, id)
      redis.call('ZREM', src .. '!accepted', id)
      index(src, id, state, 'stale')
      ordered(src, id, key, 1)
      stale[#stale + 1] = id
    elseif (not at or at <= now) and n < wanted then
      take(id, key, state, s[2])
      redis.call('HSET', src .. '!E:' .. entity, 'busy', id)
      entity_lives(src .. '!E:' .. entity, key)
      return
    else
      redis.call('ZADD', due, at or now, id)
      return
    end
  end
end
-- Woken entities first, then the due index.
local seen = {}
for _, entity in ipairs(redis.call('ZRANGEBYSCORE', src .. '!wake', '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('ZREM', src .. '!wake', entity)
  seen[entity] = true
  turn(entity)
end
-- Window after window while most of a window was rows of entities already
-- seen (up to 2048 looked at): a hot entity's backlog leaves the due index
-- in one pass, and other entities' rows behind it are reached.
local window, looked = 4 * wanted + 16, 0
while n < wanted and looked < 2048 do
  local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, window)
  local parked = 0
  looked = looked + #ids
  for _, id in ipairs(ids) do
    if n == wanted then break end
    if not placed[id] then
      local key = record(id)
      local s = redis.call('HMGET', key, 'state', 'next_attempt', 'attempts', 'entity')
      if not ((s[1] == 'queued' or s[1] == 'processing') and s[2] and tonumber(s[2]) <= now) then
        redis.call('ZREM', due, id)
      elseif not s[4] then
        take(id, key, s[1], s[3])
      else
        -- Not its entity's turn (or its turn is decided below): out of the
        -- due index until its entity is woken or turn() puts it back.
        redis.call('ZREM', due, id)
        if seen[s[4]] then
          parked = parked + 1
        else
          seen[s[4]] = true
          turn(s[4])
        end
      end
    end
  end
  if #ids < window or parked * 2 <= #ids then break end
end
return {out, stale}
";

/// KEYS[1] the dead index of a source; ARGV source, most to report, most
/// dead events to look at. The dead events, oldest death first, that are
/// their entity's first pending event (those before it in
/// `{source}!e:{entity}` all gone or settled): {id, entity, updated,
/// events after it, ...}.
pub(super) const BLOCKED: &str = "
local src, limit = ARGV[1], tonumber(ARGV[2])
local out, found = {}, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)) do
  if found == limit then break end
  local r = redis.call('HMGET', opened(src .. ':' .. id), 'state', 'entity', 'order_seq', 'updated')
  if r[1] == 'dead' and r[2] then
    local pending = src .. '!e:' .. r[2]
    local rank = redis.call('ZRANK', pending, place_of(id, tonumber(r[3])))
    local first = rank ~= false and rank < 10
    if first and rank > 0 then
      for _, before in ipairs(redis.call('ZRANGE', pending, 0, rank - 1)) do
        local s = redis.call('HGET', opened(src .. ':' .. string.sub(before, 22)), 'state')
        if s and s ~= 'completed' and s ~= 'stale' then first = false end
      end
    end
    if first then
      found = found + 1
      out[#out + 1] = id
      out[#out + 1] = r[2]
      out[#out + 1] = r[4]
      out[#out + 1] = redis.call('ZCARD', pending) - rank - 1
    end
  end
end
return out
";

/// KEYS[1] key; ARGV token, lease ms, source, id. An async event's next
/// look moves with its lease.
pub(super) const RENEW: &str = "
open_packed(KEYS[1])
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
/// source, id, '1' to write a packed claim's completion packed too
/// (`store.packed_completions`), and the gateway's reading of Redis's time
/// (`script_stamped`, `prelude.rs`): a packed claim is stamped with it; a record that
/// is a hash (it may be queued or ordered, whose wake-ups are judged by
/// Redis's clock) reads the clock.
pub(super) const COMPLETE: &str = "
local packed = redis.pcall('GET', KEYS[1])
if type(packed) == 'string' then
  -- A packed claim (`packed.rs`), the common case: written completed at once.
  local token, sha = string.match(packed, '^p1:([^:]*):([^:]*):')
  if token ~= ARGV[1] then return 0 end
  if ARGV[9] == '1' then
    local at = ARGV[10]
    redis.call('SET', KEYS[1], 'p2:' .. ARGV[2] .. ':' .. ARGV[6] .. ':1:' .. at .. ':' .. at ..
      ':' .. sha .. ':' .. #ARGV[3] .. ':' .. ARGV[3] .. ARGV[4], 'PX', ARGV[5])
  else
    redis.call('DEL', KEYS[1])
    redis.call('HSET', KEYS[1], 'state', 'completed', 'completed_at', now, 'updated', now,
      'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4], 'body_kept', ARGV[6],
      'body_sha256', sha, 'attempts', 1, 'first_seen', now)
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
  end
  index(ARGV[7], ARGV[8], nil, 'completed')
  return 1
end
if not packed then return 0 end
local s = redis.call('HMGET', KEYS[1], 'token', 'state', 'next_attempt')
if s[1] ~= ARGV[1] then return 0 end
now = redis_now()
local from = s[2]
redis.call('HSET', KEYS[1], 'state', 'completed', 'completed_at', now, 'updated', now,
  'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4], 'body_kept', ARGV[6])
redis.call('HDEL', KEYS[1], 'token', 'lease_until', 'next_attempt')
if s[3] then
  redis.call('ZREM', ARGV[7] .. '!due', ARGV[8])
  redis.call('ZREM', ARGV[7] .. '!accepted', ARGV[8])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if s[3] then ordered(ARGV[7], ARGV[8], KEYS[1], 2) end
index(ARGV[7], ARGV[8], from, 'completed')
return 1
";

/// KEYS[1] key; ARGV token, a sync record\'s state (failed|dead), hold (1
/// keeps token and lease), error class, upstream status ('' none), route,
/// method, query, headers, body, retention ms, source, id, an accepted
/// record's retry ms ('' dead), the attempt's history line. Applies the
/// future that fits the record's duty, and keeps the last ten history
/// lines; returns the state left, 0 when the token no longer holds it.
pub(super) const FAIL: &str = "
open_packed(KEYS[1])
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
local history = redis.call('HGET', KEYS[1], 'history')
if history and history ~= '' then history = history .. '\\n' .. ARGV[15] else history = ARGV[15] end
local _, lines = string.gsub(history, '\\n', '')
while lines >= 10 do
  history = string.sub(history, string.find(history, '\\n', 1, true) + 1)
  lines = lines - 1
end
redis.call('HSET', KEYS[1], 'history', history)
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'last_status', ARGV[5])
else redis.call('HDEL', KEYS[1], 'last_status') end
if not hold then redis.call('HDEL', KEYS[1], 'token', 'lease_until') end
if to == 'queued' then
  redis.call('HSET', KEYS[1], 'next_attempt', now + tonumber(ARGV[14]))
  redis.call('ZADD', ARGV[12] .. '!due', now + tonumber(ARGV[14]), ARGV[13])
  owe(ARGV[12], ARGV[13], KEYS[1])
elseif redis.call('HDEL', KEYS[1], 'next_attempt') == 1 then
  redis.call('ZREM', ARGV[12] .. '!due', ARGV[13])
  redis.call('ZREM', ARGV[12] .. '!accepted', ARGV[13])
end
redis.call('PEXPIRE', KEYS[1], ARGV[11])
index(ARGV[12], ARGV[13], from, to)
if accepted then ordered(ARGV[12], ARGV[13], KEYS[1], 0) end
return to
";

/// KEYS[1] key; ARGV token, source, id. A released accepted event goes
/// back to its queue, due now.
pub(super) const RELEASE: &str = "
open_packed(KEYS[1])
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
  owe(ARGV[2], ARGV[3], KEYS[1])
end
redis.call('HDEL', KEYS[1], 'token', 'lease_until')
return 1
";

/// KEYS[1] key; ARGV force ('1' or '0'), source, id. Returns 1 deleted,
/// 2 in flight (a live lease, or queued: its queue owes it a delivery), 0
/// not found.
pub(super) const DELETE: &str = "
open_packed(KEYS[1])
local s = redis.call('HMGET', KEYS[1], 'state', 'lease_until')
if not s[1] then return 0 end
if ARGV[1] ~= '1' and (s[1] == 'queued' or (s[2] and tonumber(s[2]) > now)) then return 2 end
ordered(ARGV[2], ARGV[3], KEYS[1], 1)
redis.call('DEL', KEYS[1])
redis.call('ZREM', ARGV[2] .. '!' .. s[1], ARGV[3])
redis.call('ZREM', ARGV[2] .. '!due', ARGV[3])
redis.call('ZREM', ARGV[2] .. '!accepted', ARGV[3])
return 1
";

/// KEYS[1] `{source}!accepted`, KEYS[2] `{source}!queued`; ARGV source.
/// When the oldest event waiting for its delivery was first seen: the head
/// of the accepted index (events back in their queue after an attempt,
/// queued or being tried again; entries delivered, parked or forgotten
/// meanwhile retired on the way, at most 100 a call), or the
/// longest-unchanged queued event (one never tried was last changed when
/// it was accepted; one tried since is in the accepted index, first seen
/// no later). Nil when none.
pub(super) const OLDEST_OWED: &str = "
local oldest = nil
for _ = 1, 100 do
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #head == 0 then break end
  local s = redis.call('HMGET', opened(ARGV[1] .. ':' .. head[1]), 'state', 'next_attempt')
  if (s[1] == 'queued' or s[1] == 'processing') and s[2] then
    oldest = tonumber(head[2])
    break
  end
  redis.call('ZREM', KEYS[1], head[1])
end
local queued = redis.call('ZRANGE', KEYS[2], 0, 0)
if #queued > 0 then
  local seen = tonumber(redis.call('HGET', opened(ARGV[1] .. ':' .. queued[1]), 'first_seen'))
  if seen and (not oldest or seen < oldest) then oldest = seen end
end
return oldest
";

/// KEYS[1] `{prefix}readyz`: the readiness probe (see `ping`).
pub(super) const PROBE: &str = "
redis.call('HSET', KEYS[1], 'at', now)
redis.call('PEXPIRE', KEYS[1], 60000)
return tonumber(redis.call('HGET', KEYS[1], 'at'))
";
