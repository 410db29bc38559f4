-- Remove resources from a pool.
-- KEYS[1..10]: the pool's keys (lease_common.lua names each).
-- ARGV[1..n] resource names
-- Reply: how many were in the pool. A leased one stays with its holder until released or
-- expired, and then leaves instead of becoming free. Bounded: O(n log N).
-- Lost reply: safe to run twice (a set: resources already gone are left alone)
--#include lease_common
local removed = 0
for _, resource in ipairs(ARGV) do
  if redis.call('SREM', K_RESOURCES, resource) == 1 then
    removed = removed + 1
    redis.call('ZREM', K_FREE, resource)
    redis.call('HDEL', K_USES, resource)
  end
end
return removed
