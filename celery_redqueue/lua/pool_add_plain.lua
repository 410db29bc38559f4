-- Offer one plain call to a capped pool (no dedupe id, no delay: the common .delay()), and plan
-- the drain job it needs. pool_add does the same for batches, dedupe ids and delays; this one
-- receives less and does less, because it runs on every call.
-- KEYS: the first seven of pool_common.lua's (items .. flow). ARGV[1..4]: common (capacity,
-- policy, coalesce, drain lease ms).
-- ARGV[5] random score in [0, 1)
-- ARGV[6] payload
-- Returns {send_drain, -1, status} as pool_add does (wake_in_ms is always -1: nothing waits).
-- Bounded: O(log N), about nine commands.
--#include pool_common
local score, payload = tonumber(ARGV[5]), ARGV[6]
if not score or not payload then
  return redis.error_reply('ERR pool_add_plain: a bad score or no payload')
end

local now = pool_now()
-- Ids need only be unique. (One HINCRBY per counter is cheaper than one HMGET and one HSET of
-- them all: Redis formats each number HSET writes, measured.)
local seq = redis.call('HINCRBY', K_STATS, 'seq', 1)
local member = payload
if not COALESCE then member = string.format('%x:%s', seq, payload) end
if POLICY ~= 'sample' then score = seq end
local status, out = admit(member, score, 1, 0, now)
if status > 0 then
  add_counts(K_STATS, {offered = 1, accepted = 1, queued = 1 - out, evicted = out})
else
  add_counts(K_STATS, {offered = 1, rejected = 1})
end
pool_tick('in', 1, now)

-- A refused call found the pool full, so entries wait either way: a drain job is needed now
-- unless one holds the flag (plan_drain in drain_lease.lua; the wake key is not touched).
local send = plan_drain(K_DRAINS, K_WAKE, DRAIN_TTL, now, now)
return {send, -1, status}
