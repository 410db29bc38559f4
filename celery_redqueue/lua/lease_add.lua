-- Add leased resources; new ones are free at once (score 0: the never-used go first) and
-- wake waiting clients.
-- KEYS[1..10]: the structure's keys (lease_keys.lua names each).
-- ARGV[1..n] resource names
-- Reply: how many were new. A name removed while leased and added again stays with its
-- holder and becomes free on release. Bounded: O(n log N).
-- Lost reply: safe to run twice (a set: resources already there are left as they are)
--#include lease_keys
--#include lease_check
--#include lease_wake
local leases = lease_keys(KEYS)
lease_check(leases)
local added, freed = 0, 0
for _, resource in ipairs(ARGV) do
  if redis.call('SADD', leases.resources, resource) == 1 then
    added = added + 1
    if not redis.call('ZSCORE', leases.leased, resource) then
      redis.call('ZADD', leases.free, 0, resource)
      freed = freed + 1
    end
  end
end
lease_wake(leases, freed)
return added
