-- Return expired leases to the free set and wake as many waiting clients.
-- KEYS[1..10]: the pool's keys (lease_common.lua names each).
-- ARGV[1] most leases reclaimed by this call
-- Reply: how many leases were reclaimed. Bounded: O(limit * log N).
-- Lost reply: safe to run twice (a second run reclaims only what expired since)
--#include lease_common
local limit = tonumber(ARGV[1])
local expired, returned = reclaim(limit, lease_now())
wake(returned)
return expired
