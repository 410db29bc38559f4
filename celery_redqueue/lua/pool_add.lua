-- Offer calls to a capped pool (or hold them until due), and plan the drain job they need.
-- One script for every store. The common call (no dedupe id, no delay, a pool with room that
-- does not coalesce) runs first and returns in eleven commands (TIME; ZCARD, HMGET of the
-- stats, the last listener and the ages type, read and checked before the first write; the
-- arrival slot's HINCRBY, the id's HINCRBY, ZADD, the folded counter's HINCRBY, the flow
-- tick; SET NX of the drain flag), before the helpers only the other cases need are defined: Lua runs a script top to bottom, so that path never defines
-- them (defining them costs it about 1 us of server CPU per call, 6 %). It replaced a twin
-- script for the common call; docs/performance.md ("One pooled call") has the figure.
-- KEYS: the first thirteen of pool_keys.lua's, as this line names them:
-- Parts: items counts stats drains receives ages arrivals flow scheduled dedupe wake signal listening
-- ARGV[1..4]: common (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] 'plain': calls with no dedupe id and no delay (a single .delay(), add_many, a
-- buffer() flush); ARGV[6], ARGV[7], ... pairs: random score in [0, 1), payload.
-- Otherwise ARGV[5] is the dedupe window ms (0: no producer-side deduplication) and ARGV[6],
-- ARGV[7], ... groups of 4: random score in [0, 1), payload, dedupe id ('' for none), delay ms
-- (0: now).
-- Returns {send_drain, wake_in_ms, status..., evicted member...}: send_drain 1 means "send a
-- drain job now"; wake_in_ms >= 0 means "send a drain job with this countdown" (no job is
-- scheduled earlier). Status (pool_status.lua): REFUSED, KEPT, EVICTED, MERGED, DUPLICATE,
-- DELAYED; then the member each EVICTED call pushed out, in order (whose waiter is told; not
-- for 'plain' calls, whose callers name no evicted call).
-- Bounded: O(batch * log N).
-- Lost reply: raises (a store: a second run would keep the calls twice; pass dedupe ids to make
-- calling again safe)
--#include clock
--#include tick
--#include listener_live
--#include checked_call
--#include pool_status
--#include pool_next_ids
--#include pool_take_ids
--#include pool_arrival
--#include pool_arrive
local plain = ARGV[5] == 'plain'
local stride = plain and 2 or 4
local calls = (#ARGV - 5) / stride
if not tonumber(ARGV[1]) or calls < 1 or calls ~= math.floor(calls) then
  return redis.error_reply('ERR pool_add: a bad capacity, or no calls (groups of ' .. stride .. ')')
end
for i = 6, #ARGV, stride do
  if not tonumber(ARGV[i]) or not (plain or tonumber(ARGV[i + 3])) then
    return redis.error_reply('ERR pool_add: call ' .. (i - 6) / stride + 1 .. ' has a bad score or delay')
  end
end
local now = math.floor(now_ms())

if plain and ARGV[3] ~= '1' then
  local K_ITEMS, K_STATS, K_DRAINS, K_AGES, K_ARRIVALS = KEYS[1], KEYS[3], KEYS[4], KEYS[6], KEYS[7]
  local K_FLOW, K_SIGNAL, K_LISTENING = KEYS[8], KEYS[12], KEYS[13]
  local capacity, sample, lease = tonumber(ARGV[1]), ARGV[2] == 'sample', ARGV[4]
  -- Everything it reads or could fail on, before its first write (Redis does not roll back a
  -- script that fails half-way): a key of another type, or a counter that is not an integer,
  -- stops it here, named (checked_call.lua), nothing written. The commands it runs anyway are
  -- the checks, plus the stats fields and the ages type: 3 us of server time per call over
  -- the unchecked script (+12 %; +3 % per add), bench/script_cost.py pool_add --against <rev>.
  local depth = checked_call('ZCARD', K_ITEMS)
  if depth + calls <= capacity then
    local fields = checked_call('HMGET', K_STATS, 'seq', 'offered+accepted+depth')
    local last = fields[1] or '0'
    if not (string.match(last, '^%d+$') and string.match(fields[2] or '0', '^%-?%d+$')) then
      error('CORRUPT ' .. K_STATS .. ' field seq or offered+accepted+depth is not an integer', 0)
    end
    local ok, live = pcall(listener_live, K_LISTENING, now)
    if not ok then error('CORRUPT ' .. K_LISTENING .. ' holds another type than a zset', 0) end
    local signal_empty = live and checked_call('LLEN', K_SIGNAL) == 0
    -- Ids carry the arrival (pool_take_ids.lua); FIFO policies order by them too. Known before
    -- the first write, so the arrival slots are counted first: the first slot's count is the
    -- first write (checked_call names a bad one), a second slot's (a batch across a slot's
    -- last ids: rare) is read first, and the ages type is checked.
    local seq = pool_next_ids(tonumber(last), now)
    local result, entries, n, slots, order = {0, -1}, {}, 0, {}, {}
    for i = 6, #ARGV, 2 do
      seq, n = seq + 1, n + 2
      local member = string.format('%x:%s', seq, ARGV[i + 1])
      entries[n - 1], entries[n] = sample and ARGV[i] or string.format('%d', seq), member
      result[n / 2 + 2] = KEPT
      local _, slot = pool_arrival(seq)
      if not slots[slot] then order[#order + 1] = slot end
      slots[slot] = (slots[slot] or 0) + 1
    end
    local kind = redis.call('TYPE', K_AGES).ok
    if kind ~= 'zset' and kind ~= 'none' then error('CORRUPT ' .. K_AGES .. ' holds a ' .. kind, 0) end
    for i = 2, #order do
      if not string.match(checked_call('HGET', K_ARRIVALS, order[i]) or '0', '^%d+$') then
        error('CORRUPT ' .. K_ARRIVALS .. ' field ' .. order[i] .. ' is not an integer', 0)
      end
    end
    for i, slot in ipairs(order) do
      if i == 1 and checked_call('HINCRBY', K_ARRIVALS, slot, slots[slot]) == slots[slot] then
        redis.call('ZADD', K_AGES, now, slot)
      elseif i > 1 then
        pool_arrive(K_AGES, K_ARRIVALS, slot, now, slots[slot])
      end
    end
    pool_take_ids(K_STATS, calls, now)
    redis.call('ZADD', K_ITEMS, unpack(entries))
    -- One folded counter for offered, accepted and depth (figures.unfold reads it).
    redis.call('HINCRBY', K_STATS, 'offered+accepted+depth', calls)
    tick(K_FLOW, 'in', calls, now)
    -- Entries wait: a drain job is needed now unless one holds the flag (plan_drain.lua's
    -- rule; the wake key is not touched), or a listener waits on the wake signal
    -- (wake_listener.lua's rule): it is woken and takes them. (A drains key of another type:
    -- SET NX leaves it.)
    if live then
      if signal_empty then
        redis.call('RPUSH', K_SIGNAL, 1)
        redis.call('PEXPIRE', K_SIGNAL, lease)
      end
    elseif redis.call('SET', K_DRAINS, 1, 'NX', 'PX', lease) then
      result[1] = 1
    end
    return result
  end
end

-- Every other store: a full or coalescing pool, dedupe ids, delays. Each call on its own.
--#include add_counts
--#include forget_expired
--#include plan_drain
--#include wake_listener
--#include pool_keys
--#include pool_admit
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local window = plain and 0 or tonumber(ARGV[5])
local dedupe, any_delay = false, false
for i = 6, #ARGV, stride do
  if not plain and tonumber(ARGV[i + 3]) > 0 then any_delay = true end
  if not plain and ARGV[i + 2] ~= '' then dedupe = true end
end
dedupe = dedupe and window > 0
-- Forget a few expired dedupe ids whenever ids are recorded: bounded work, and the set cannot
-- grow unbounded (each id recorded forgets up to 100 expired ones).
check_keys({pool.items, 'zset', pool.counts, 'hash', pool.receives, 'hash', pool.ages, 'zset',
  pool.arrivals, 'hash', pool.scheduled, 'zset', pool.dedupe, 'zset', pool.flow, 'hash',
  pool.drains, 'string', pool.wake, 'string', pool.listening, 'zset',
  pool.signal, 'list'}, pool.stats)
if dedupe then forget_expired(pool.dedupe, now) end

-- Ids for the whole batch in one step (a duplicate leaves a gap: ids need only be unique and
-- carry the arrival, pool_take_ids.lua).
local seq = pool_take_ids(pool.stats, calls, now)
local c = {accepted = 0, rejected = 0, evicted = 0, depth = 0, duplicates = 0, delayed = 0}
local result, victims = {0, -1}, {}
-- Every call on its own: refused as a duplicate, held until due, or admitted under the policy.
for i = 6, #ARGV, stride do
  local score, payload = tonumber(ARGV[i]), ARGV[i + 1]
  local dedupe_id, delay = '', 0
  if not plain then dedupe_id, delay = ARGV[i + 2], tonumber(ARGV[i + 3]) end
  seq = seq + 1
  local status
  if dedupe and dedupe_id ~= '' and redis.call('ZSCORE', pool.dedupe, dedupe_id) then
    status = DUPLICATE
    c.duplicates, c.rejected = c.duplicates + 1, c.rejected + 1
  elseif delay > 0 then
    redis.call('ZADD', pool.scheduled, now + delay, string.format('%x', seq) .. ':' .. ARGV[i] .. ':' .. payload)
    status = DELAYED
    c.delayed = c.delayed + 1
  else
    local member = payload
    if not pool.coalesce then member = string.format('%x:%s', seq, payload) end
    if pool.policy ~= 'sample' then score = seq end
    local out, victim
    status, out, victim = pool_admit(pool, member, score, 1, 0, now)
    if victim then victims[#victims + 1] = victim end
    if status == REFUSED then
      c.rejected = c.rejected + 1
    else
      c.accepted, c.depth, c.evicted = c.accepted + 1, c.depth + 1 - out, c.evicted + out
    end
  end
  -- Remember the dedupe id only for a call that was taken: a refused call may be retried.
  if dedupe and dedupe_id ~= '' and status ~= REFUSED and status ~= DUPLICATE then
    redis.call('ZADD', pool.dedupe, now + window, dedupe_id)
  end
  result[#result + 1] = status
end

-- One HINCRBY per counter that moved (add_counts skips zeros).
c.offered = c.accepted + c.rejected
add_counts(pool.stats, c)
tick(pool.flow, 'in', c.offered, now)

-- One wake mechanism for immediate and delayed calls (plan_drain.lua): entries
-- waiting need a drain job now unless one holds the flag; delayed calls need one scheduled
-- for the first of them unless one is scheduled no later. A call that kept an entry knows
-- the pool is not empty without asking.
-- A listener waiting on the wake signal (wake_listener.lua) is woken and takes kept calls itself;
-- for delayed calls its look answers LATER and it plans their wake-up itself (no job here).
local woken = c.accepted + c.delayed > 0
  and wake_listener(pool.listening, pool.signal, pool.lease, now)
if not woken then
  local next_at = nil
  if c.accepted > 0 and not any_delay or redis.call('ZCARD', pool.items) > 0 then
    next_at = now
  else
    local first = redis.call('ZRANGE', pool.scheduled, 0, 0, 'WITHSCORES')
    if #first > 0 then next_at = tonumber(first[2]) end
  end
  result[1], result[2] = plan_drain(pool.drains, pool.wake, pool.lease, now, next_at)
end
if not plain then
  for _, victim in ipairs(victims) do result[#result + 1] = victim end
end
return result
