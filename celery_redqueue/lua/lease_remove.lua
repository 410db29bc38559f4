-- Remove leased resources.
-- KEYS[1..10]: the structure's keys (lease_keys.lua names each).
-- ARGV[1..n] resource names
-- Reply: how many were resources of it. A leased one stays with its holder until released or
-- expired, and then leaves instead of becoming free. Bounded: O(n log N).
-- Lost reply: safe to run twice (a set: resources already gone are left alone)
--#include lease_keys
--#include lease_check
local leases = lease_keys(KEYS)
lease_check(leases)
-- A resource is free or leased (lease_add, lease_acquire and lease_release move
-- it in one step): one that is neither is a corruption, named before anything is removed.
for _, resource in ipairs(ARGV) do
  if redis.call('SISMEMBER', leases.resources, resource) == 1 and not redis.call('ZSCORE', leases.free, resource)
      and not redis.call('ZSCORE', leases.leased, resource) then
    error('CORRUPT ' .. leases.free .. ': ' .. resource .. ' is neither free nor leased', 0)
  end
end
local removed = 0
for _, resource in ipairs(ARGV) do
  if redis.call('SREM', leases.resources, resource) == 1 then
    removed = removed + 1
    redis.call('ZREM', leases.free, resource)
    redis.call('HDEL', leases.uses, resource)
  end
end
return removed
