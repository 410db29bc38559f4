-- Read a pool's figures in one consistent step.
-- KEYS[1..10]: the pool's keys (lease_common.lua names each).
-- No ARGV.
-- Reply: {resources, free, leased and valid, leased but expired, counter, value, ...}.
-- Read-only. Bounded: O(log N + number of counters).
-- Lost reply: safe to run twice (read-only)
--#include lease_common
local now = lease_now()
local result = {
  redis.call('SCARD', K_RESOURCES),
  redis.call('ZCARD', K_FREE),
  redis.call('ZCOUNT', K_LEASED, '(' .. string.format('%d', now), '+inf'),
  redis.call('ZCOUNT', K_LEASED, '-inf', now),
}
local counters = redis.call('HGETALL', K_STATS)
for i = 1, #counters do
  result[#result + 1] = counters[i]
end
return result
