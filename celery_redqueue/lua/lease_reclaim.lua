-- Return expired leases to the free set and wake as many waiting clients.
-- KEYS[1..10]: the structure's keys (lease_keys.lua names each).
-- ARGV[1] most leases reclaimed by this call
-- Reply: how many leases were reclaimed. Bounded: O(limit * log N).
-- Lost reply: safe to run twice (a second run reclaims only what expired since)
--#include lease_keys
--#include lease_check
--#include lease_now
--#include lease_take_back
--#include lease_wake
local leases = lease_keys(KEYS)
lease_check(leases)
local limit = tonumber(ARGV[1])
local expired, returned = lease_take_back(leases, limit, lease_now())
lease_wake(leases, returned)
return expired
