-- A unique script's check of its keys before its first write (spliced in at
-- "--#include unique_check"): a key of another type or a counter that is not an integer fails
-- the script with "CORRUPT ..." (CorruptDataError), nothing written.
--#include check_keys
local function unique_check(locks)
  check_keys({locks.held, 'hash', locks.expiry, 'zset', locks.calls, 'hash',
    locks.calls_at, 'zset'}, locks.stats)
end
