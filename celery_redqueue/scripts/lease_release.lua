-- Release a lease if the caller still holds it, and wake one waiting client.
-- KEYS[1] resources  set: every resource of the pool
-- KEYS[2] free       zset: free resource -> when it became free (ms)
-- KEYS[3] leased     zset: leased resource -> lease expiry (ms, server clock)
-- KEYS[4] tokens     hash: leased resource -> token of its holder
-- KEYS[5] stats      hash: counters
-- KEYS[6] notify     list: one entry per resource freed while clients may be waiting
-- ARGV[1] resource
-- ARGV[2] token of the caller's lease
-- Returns 1 when released; 0 when the token does not hold the resource (another holder has it,
-- or it was released or reclaimed) or the lease ran out, in which case the resource is
-- reclaimed here and counted as such. Bounded: O(log N).
local resources, free, leased, tokens, stats, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local resource, token = ARGV[1], ARGV[2]
if redis.call('HGET', tokens, resource) ~= token then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = tonumber(redis.call('ZSCORE', leased, resource) or '0')
redis.call('ZREM', leased, resource)
redis.call('HDEL', tokens, resource)

local held = 1
local free_since = now
if expiry <= now then
  held = 0
  free_since = expiry
  redis.call('HINCRBY', stats, 'reclaimed', 1)
else
  redis.call('HINCRBY', stats, 'released', 1)
end
if redis.call('SISMEMBER', resources, resource) == 1 then
  redis.call('ZADD', free, free_since, resource)
  redis.call('RPUSH', notify, 1)
  redis.call('LTRIM', notify, -redis.call('SCARD', resources), -1)
  redis.call('PEXPIRE', notify, 60000)
end
return held
