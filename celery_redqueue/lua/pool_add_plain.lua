-- Offer one plain call to a capped pool (no dedupe id, no delay: the common .delay()), and plan
-- the drain job it needs. pool_add does the same for batches, dedupe ids and delays; this one
-- receives less and does less, because it runs on every call: a pool with room keeps the call
-- in eight commands, and the helpers a full or coalescing pool needs (pool_common's) are only
-- defined on that path (defining them costs more than the whole common case, measured).
-- KEYS: the first seven of pool_common.lua's (items .. flow). ARGV[1..4]: common (capacity,
-- policy, coalesce, drain lease ms).
-- ARGV[5] random score in [0, 1)
-- ARGV[6] payload
-- Returns {send_drain, -1, status} as pool_add does (wake_in_ms is always -1: nothing waits).
-- Bounded: O(log N), about eight commands.
--#include clock
--#include flow
local K_ITEMS, K_STATS, K_DRAINS, K_AGES, K_FLOW = KEYS[1], KEYS[3], KEYS[4], KEYS[6], KEYS[7]
local capacity, coalesce, lease = tonumber(ARGV[1]), ARGV[3] == '1', ARGV[4]
local score, payload = tonumber(ARGV[5]), ARGV[6]
if not score or not payload or not capacity then
  return redis.error_reply('ERR pool_add_plain: a bad capacity or score, or no payload')
end

local now = math.floor(now_ms())
-- Ids need only be unique; FIFO policies order by them too.
local seq = redis.call('HINCRBY', K_STATS, 'seq', 1)
local member = payload
if not coalesce then member = string.format('%x:%s', seq, payload) end
if ARGV[2] ~= 'sample' then score = seq end

local status
if not coalesce and redis.call('ZCARD', K_ITEMS) < capacity then
  redis.call('ZADD', K_ITEMS, score, member)
  redis.call('ZADD', K_AGES, now, member)
  -- One folded counter for offered, accepted and queued (figures.unfold reads it).
  redis.call('HINCRBY', K_STATS, 'offered+accepted+queued', 1)
  status = 1
else
  -- Full, or coalescing: the policy decides, as for pool_add.
  --#include pool_common
  local out
  status, out = admit(member, score, 1, 0, now)
  if status > 0 then
    add_counts(K_STATS, {offered = 1, accepted = 1, queued = 1 - out, evicted = out})
  else
    add_counts(K_STATS, {offered = 1, rejected = 1})
  end
end
tick(K_FLOW, 'in', 1, now)

-- A refused call found the pool full, so entries wait either way: a drain job is needed now
-- unless one holds the flag (plan_drain in drain_lease.lua; the wake key is not touched).
local send = 0
if redis.call('SET', K_DRAINS, 1, 'NX', 'PX', lease) then send = 1 end
return {send, -1, status}
