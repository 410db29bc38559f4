-- Release a lease if the caller still holds it, and wake one waiting client.
-- KEYS[1..8]: the pool's keys (lease_common.lua names each).
-- ARGV[1] resource
-- ARGV[2] token of the caller's lease
-- Reply: 1 when released; 0 when the token does not hold the resource (another holder has it,
-- or it was released or reclaimed) or the lease ran out, in which case the resource is
-- reclaimed here and counted as such. Bounded: O(log N).
--#include lease_common
local resource, token = ARGV[1], ARGV[2]
if redis.call('HGET', K_TOKENS, resource) ~= token then
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
if redis.call('SISMEMBER', K_RESOURCES, resource) == 1 then
  redis.call('ZADD', K_FREE, free_since, resource)
  wake(1)
end
return held
