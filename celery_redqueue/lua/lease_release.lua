-- Release a lease if the caller still holds it, and wake one waiting client.
-- KEYS[1..10]: the pool's keys (lease_common.lua names each).
-- ARGV[1] resource
-- ARGV[2] token of the caller's lease
-- Reply: 1 when released; 0 when the token does not hold the resource (another holder has it,
-- or it was released or reclaimed) or the lease ran out, in which case the resource is
-- reclaimed here and counted as such; 2 when this release was applied already (a re-send).
-- Bounded: O(log N).
-- Lost reply: safe to run twice: the release is recorded (call_records.lua) under its token,
-- and a second run replies what the first did ("already done", 2, for a release in time) and
-- changes nothing.
--#include lease_common
--#include call_records
local resource, token = ARGV[1], ARGV[2]
if redis.call('HGET', K_TOKENS, resource) ~= token then
  -- A re-send of a release that was applied: what it replied, with "already done" for 1.
  if recorded(K_CALLS, 'release:' .. token) == '1' then return 2 end
  return 0
end
local now = lease_now()
local expiry = tonumber(redis.call('ZSCORE', K_LEASED, resource) or '0')
redis.call('ZREM', K_LEASED, resource)
redis.call('HDEL', K_TOKENS, resource)

local held = 1
local free_since = now
if expiry <= now then
  held = 0
  free_since = expiry
  redis.call('HINCRBY', K_STATS, 'reclaimed', 1)
else
  redis.call('HINCRBY', K_STATS, 'released', 1)
end
record_call(K_CALLS, K_CALLS_AT, 'release:' .. token, held, now)
if redis.call('SISMEMBER', K_RESOURCES, resource) == 1 then
  redis.call('ZADD', K_FREE, free_since, resource)
  wake(1)
end
return held
