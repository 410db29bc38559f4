-- Add resources to a pool; new ones are free at once (score 0: the never-used go first) and
-- wake waiting clients.
-- KEYS[1..10]: the pool's keys (lease_common.lua names each).
-- ARGV[1..n] resource names
-- Reply: how many were new. A name removed while leased and added again stays with its
-- holder and becomes free on release. Bounded: O(n log N).
-- Lost reply: safe to run twice (a set: resources already there are left as they are)
--#include lease_common
local added, freed = 0, 0
for _, resource in ipairs(ARGV) do
  if redis.call('SADD', K_RESOURCES, resource) == 1 then
    added = added + 1
    if not redis.call('ZSCORE', K_LEASED, resource) then
      redis.call('ZADD', K_FREE, 0, resource)
      freed = freed + 1
    end
  end
end
wake(freed)
return added
