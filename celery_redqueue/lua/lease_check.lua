-- Check leased resources' keys (a lease_keys table) before a script's first write (spliced in at
-- "--#include lease_check"): a key of another type, or a stats counter that is not an integer,
-- stops the script with "CORRUPT <key> ..." (check_keys.lua), nothing written. Ten TYPEs and
-- the few counters: a lease call is not a producer's hot path.
--#include check_keys
local function lease_check(leases)
  check_keys({leases.resources, 'set', leases.free, 'zset', leases.leased, 'zset', leases.tokens,
    'hash', leases.notify, 'list', leases.fences, 'hash', leases.uses, 'hash', leases.calls,
    'hash', leases.calls_at, 'zset'}, leases.stats)
end
