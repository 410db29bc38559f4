-- Leased resources' keys by name, as one table the lease helpers take (spliced in at
-- "--#include lease_keys"); `keys` is a script's KEYS.
-- Every lease script receives the same KEYS (see leases.PARTS in leases.py):
-- KEYS[1] resources  set: every resource of the structure
-- KEYS[2] free       zset: free resource -> when it became free (ms); lowest is leased first,
--                    new resources score 0 so the never-used go first
-- KEYS[3] leased     zset: leased resource -> lease expiry (ms, server clock)
-- KEYS[4] tokens     hash: leased resource -> token of its holder
-- KEYS[5] stats      hash: counters (acquired, released, reclaimed, renewed, missed)
-- KEYS[6] notify     list: one entry per resource freed while clients may be waiting
-- KEYS[7] fences     hash: resource -> fencing token of its latest lease (never decreases)
-- KEYS[8] uses       hash: resource -> leases granted on it (one field per resource)
-- KEYS[9] calls      hash: call id -> what it did (record_call.lua: re-sent acquires, releases)
-- KEYS[10] calls_at  zset: call id -> when its record expires (ms)
local function lease_keys(keys)
  return {
    resources = keys[1], free = keys[2], leased = keys[3], tokens = keys[4], stats = keys[5],
    notify = keys[6], fences = keys[7], uses = keys[8], calls = keys[9], calls_at = keys[10],
  }
end
