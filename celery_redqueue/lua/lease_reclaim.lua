-- Return expired leases to the free set and wake as many waiting clients.
-- KEYS: see lease_common.lua.
-- ARGV[1] most leases reclaimed by this call
-- Returns how many leases were reclaimed. Bounded: O(limit * log N).
--#include lease_common
local expired, returned = reclaim(tonumber(ARGV[1]), lease_now())
wake(returned)
return expired
