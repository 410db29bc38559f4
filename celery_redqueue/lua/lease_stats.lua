-- Read the leased resources' figures in one consistent step.
-- KEYS[1..10]: the structure's keys (lease_keys.lua names each).
-- No ARGV.
-- Reply: {resources, free, leased and valid, leased but expired, counter, value, ...}.
-- Read-only. Bounded: O(log N + number of counters).
-- Lost reply: safe to run twice (read-only)
--#include lease_keys
--#include lease_check
--#include lease_now
local leases = lease_keys(KEYS)
lease_check(leases)
local now = lease_now()
local result = {
  redis.call('SCARD', leases.resources),
  redis.call('ZCARD', leases.free),
  redis.call('ZCOUNT', leases.leased, '(' .. string.format('%d', now), '+inf'),
  redis.call('ZCOUNT', leases.leased, '-inf', now),
}
local counters = redis.call('HGETALL', leases.stats)
for i = 1, #counters do
  result[#result + 1] = counters[i]
end
return result
