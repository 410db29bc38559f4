-- Offer calls to a capped pool (or hold them until due), and plan the drain job they need.
-- KEYS: the first thirteen of pool_keys.lua's, as this line names them:
-- Parts: items counts stats drains receives ages arrivals flow scheduled dedupe wake signal listening
-- ARGV[1..4]: common (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] dedupe window ms (0: no producer-side deduplication)
-- ARGV[6], ARGV[7], ... groups of 4: random score in [0, 1), payload, dedupe id ('' for none),
-- delay ms (0: now)
-- Returns {send_drain, wake_in_ms, status..., evicted member...}: send_drain 1 means "send a
-- drain job now"; wake_in_ms >= 0 means "send a drain job with this countdown" (no job is
-- scheduled earlier). Status (pool_status.lua): REFUSED, KEPT, EVICTED, MERGED, DUPLICATE,
-- DELAYED; then the member each EVICTED call pushed out, in order (whose waiter is told).
-- Bounded: O(batch * log N).
-- Calls with no dedupe id and no delay run pool_add_plain instead (pool.py's _add_plain); here
-- what a call does not use (dedupe, the delayed set, the wake key) still costs nothing.
-- Lost reply: raises (a store: a second run would keep the calls twice; pass dedupe ids to make
-- calling again safe)
--#include clock
--#include tick
--#include add_counts
--#include forget_expired
--#include plan_drain
--#include wake_listener
--#include pool_keys
--#include pool_status
--#include pool_take_ids
--#include pool_admit
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local window = tonumber(ARGV[5])
local calls = (#ARGV - 5) / 4
local dedupe, any_delay = false, false
for i = 6, #ARGV, 4 do
  local delay = tonumber(ARGV[i + 3])
  if not tonumber(ARGV[i]) or not delay then
    return redis.error_reply('ERR pool_add: call ' .. (i - 2) / 4 .. ' has a bad score or delay')
  end
  if delay > 0 then any_delay = true end
  if ARGV[i + 2] ~= '' then dedupe = true end
end
dedupe = dedupe and window > 0

local now = math.floor(now_ms())
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
for i = 6, #ARGV, 4 do
  local score, payload, dedupe_id, delay = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
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
for _, victim in ipairs(victims) do result[#result + 1] = victim end
return result
