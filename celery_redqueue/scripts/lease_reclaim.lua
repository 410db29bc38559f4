-- Return expired leases to the free set and wake as many waiting clients.
-- KEYS[1] resources  set: every resource of the pool
-- KEYS[2] free       zset: free resource -> when it became free (ms)
-- KEYS[3] leased     zset: leased resource -> lease expiry (ms, server clock)
-- KEYS[4] tokens     hash: leased resource -> token of its holder
-- KEYS[5] stats      hash: counters
-- KEYS[6] notify     list: one entry per resource freed while clients may be waiting
-- ARGV[1] most leases reclaimed by this call
-- Returns how many leases were reclaimed. Bounded: O(limit * log N).
local resources, free, leased, tokens, stats, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', leased, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local returned = 0
for i = 1, #expired, 2 do
  local resource = expired[i]
  redis.call('ZREM', leased, resource)
  redis.call('HDEL', tokens, resource)
  if redis.call('SISMEMBER', resources, resource) == 1 then
    redis.call('ZADD', free, expired[i + 1], resource)
    redis.call('RPUSH', notify, 1)
    returned = returned + 1
  end
end
if #expired > 0 then
  redis.call('HINCRBY', stats, 'reclaimed', #expired / 2)
end
if returned > 0 then
  redis.call('LTRIM', notify, -redis.call('SCARD', resources), -1)
  redis.call('PEXPIRE', notify, 60000)
end
return #expired / 2
