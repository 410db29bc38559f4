-- Take back in-flight batches whose deadline passed (their drain died, or its heartbeat stopped).
-- At most once: their calls count as lost. At least once: each entry goes back into the pool
-- (competing for room like any entry; what does not fit counts as evicted), or to the
-- dead-letter list once it has been received max_receives times; a batch record that cannot
-- be decoded is dead-lettered whole, as it is, with the reason.
-- KEYS[1..21]: the pool's keys (pool_keys.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] most batches to reap in this call, ARGV[6] at least once (1|0), ARGV[7] max receives
-- ARGV[8] reply the payloads of the calls counted lost, or evicted (a returned call with no room
-- left, or one it pushed out) (1|0; absent: 0), for their waiters
-- Reply: {lost, returned, dead_lettered, send_drain, payload...} (a lost batch whose record
-- cannot be read is counted without its payloads). Bounded: O(limit * batch * log N).
-- Lost reply: safe to run twice (a second run takes back only what expired since; a drain job
-- the lost reply asked for is sent by the next reaper run)
--#include clock
--#include rearm_drain
--#include pool_keys
--#include pool_status
--#include pool_id
--#include pool_arrival
--#include pool_unpack_batch
--#include pool_admit
--#include pool_bury
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local limit, at_least_once, max_receives = tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7])
local tell_lost = ARGV[8] == '1'
local now = math.floor(now_ms())

-- Read and decode every expired batch before writing anything.
check_keys({pool.items, 'zset', pool.counts, 'hash', pool.receives, 'hash', pool.ages, 'zset',
  pool.arrivals, 'hash', pool.scheduled, 'zset', pool.dead, 'list', pool.inflight, 'zset',
  pool.inflight_calls, 'hash', pool.inflight_items, 'hash', pool.drains, 'string',
  pool.wake, 'string'}, pool.stats)
local batches = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', pool.inflight, '-inf', now, 'LIMIT', 0, limit)) do
  local b = {id = id, calls = tonumber(redis.call('HGET', pool.inflight_calls, id) or '0') or 0}
  b.packed = redis.call('HGET', pool.inflight_items, id)
  if b.packed and (at_least_once or tell_lost) then
    b.entries = pool_unpack_batch(b.packed, b.calls, pool.coalesce)
    b.bad = at_least_once and b.entries == nil
  end
  batches[#batches + 1] = b
end
-- The counts the returned entries will move (pool_admit: their arrival slot, or a coalescing
-- member's count it merges into; pool_evict: the slot of any entry a full pool pushes out)
-- must be integers: checked here, before the first write.
local function integer_or_none(key, field)
  local value = redis.call('HGET', key, field)
  if value and not string.match(value, '^%-?%d+$') then
    error(string.format('CORRUPT %s field %q: %q is not an integer', key, field, value), 0)
  end
end
local returning = 0
for _, b in ipairs(batches) do
  for _, entry in ipairs(at_least_once and b.entries or {}) do
    returning = returning + 1
    local _, n = pool_id(entry[1], pool.coalesce)
    if pool.coalesce then integer_or_none(pool.counts, entry[1])
    elseif n then integer_or_none(pool.arrivals, select(2, pool_arrival(n))) end
  end
end
if returning > 0 and not pool.coalesce
    and redis.call('ZCARD', pool.items) + returning > pool.capacity then
  check_keys({}, pool.arrivals)  -- the entry pushed out may be any
end

local lost, returned, buried, evicted, pushed_out = 0, 0, 0, 0, 0
local told = {}
for _, b in ipairs(batches) do
  redis.call('HDEL', pool.inflight_calls, b.id)
  redis.call('HDEL', pool.inflight_items, b.id)
  redis.call('ZREM', pool.inflight, b.id)
  if b.calls > 0 then redis.call('HINCRBY', pool.stats, 'in_flight', -b.calls) end
  if b.bad then
    pool_bury(pool, b.packed, b.calls, 0, 'undecodable batch record (cannot return its calls)', now)
    buried = buried + b.calls
  elseif at_least_once and b.entries then
    for _, entry in ipairs(b.entries) do
      local member, score, count, receives, offered_at, _, payload = unpack(entry, 1, 7)
      if receives >= max_receives then
        pool_bury(pool, payload, count, receives,
          'batch not acknowledged before its deadline (' .. receives .. ' receives)', now)
        buried = buried + count
      else
        local status, out, victim = pool_admit(pool, member, score, count, receives, offered_at)
        evicted = evicted + out
        pushed_out = pushed_out + out  -- what admit pushed out leaves the depth
        if status ~= REFUSED then returned = returned + count else evicted = evicted + count end
        local victim_id = tell_lost and victim and pool_id(victim, pool.coalesce)
        if tell_lost and status == REFUSED then told[#told + 1] = payload end
        if victim_id then
          told[#told + 1] = pool.coalesce and victim or string.sub(victim, #victim_id + 2)
        end
      end
    end
  else
    lost = lost + b.calls
    for _, entry in ipairs(b.entries or {}) do told[#told + 1] = entry[7] end
  end
end
if lost > 0 then redis.call('HINCRBY', pool.stats, 'lost', lost) end
if returned - pushed_out ~= 0 then redis.call('HINCRBY', pool.stats, 'depth', returned - pushed_out) end
if returned > 0 then redis.call('HINCRBY', pool.stats, 'redelivered', returned) end
if evicted > 0 then redis.call('HINCRBY', pool.stats, 'evicted', evicted) end
-- Returned calls need a drain job even if the dead drain's lease has not run out yet; calls
-- under no drain flag need one too (rearm_drain.lua), and delayed calls due now, or
-- later with no drain job scheduled for them (the sent drain schedules one).
local first = redis.call('ZRANGE', pool.scheduled, 0, 0, 'WITHSCORES')
local due = redis.call('ZCARD', pool.items) > 0 or (#first > 0
  and (tonumber(first[2]) <= now or redis.call('EXISTS', pool.wake) == 0))
local send = rearm_drain(pool.drains, pool.lease, #batches > 0, due)
local reply = {lost, returned, buried, send}
for _, payload in ipairs(told) do reply[#reply + 1] = payload end
return reply
