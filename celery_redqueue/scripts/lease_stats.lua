-- Read a pool's figures in one consistent step.
-- KEYS[1] resources  set: every resource of the pool
-- KEYS[2] free       zset: free resource -> when it became free (ms)
-- KEYS[3] leased     zset: leased resource -> lease expiry (ms, server clock)
-- KEYS[4] stats      hash: counters
-- No ARGV.
-- Returns {resources, free, leased and valid, leased but expired, counter, value, ...}.
-- Read-only. Bounded: O(log N + number of counters).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local result = {
  redis.call('SCARD', KEYS[1]),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCOUNT', KEYS[3], '(' .. string.format('%d', now), '+inf'),
  redis.call('ZCOUNT', KEYS[3], '-inf', now),
}
local counters = redis.call('HGETALL', KEYS[4])
for i = 1, #counters do
  result[#result + 1] = counters[i]
end
return result
