-- Remove resources from a pool.
-- KEYS: see lease_common.lua.
-- ARGV[1..n] resource names
-- Returns how many were in the pool. A leased one stays with its holder until released or
-- expired, and then leaves instead of becoming free. Bounded: O(n log N).
--#include lease_common
local removed = 0
for i = 1, #ARGV do
  if redis.call('SREM', K_RESOURCES, ARGV[i]) == 1 then
    removed = removed + 1
    redis.call('ZREM', K_FREE, ARGV[i])
    redis.call('HDEL', K_USES, ARGV[i])
  end
end
return removed
