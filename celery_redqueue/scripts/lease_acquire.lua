-- Reclaim expired leases, then lease the least recently used free resource.
-- KEYS[1] resources  set: every resource of the pool
-- KEYS[2] free       zset: free resource -> when it became free (ms); lowest is leased first
-- KEYS[3] leased     zset: leased resource -> lease expiry (ms, server clock)
-- KEYS[4] tokens     hash: leased resource -> token of its holder
-- KEYS[5] stats      hash: counters (acquired, released, reclaimed, renewed, missed)
-- KEYS[6] notify     list: one entry per resource freed while clients may be waiting
-- ARGV[1] lease time to live, ms
-- ARGV[2] token of the new holder (unique, chosen by the caller)
-- ARGV[3] most expired leases this call reclaims
-- Returns {1, resource, expiry_ms} when a resource was leased, or
-- {0, ms until the earliest lease expires (-1: no lease), number of resources} when none is free.
-- Bounded: O((reclaimed + 1) * log N).
local resources, free, leased, tokens, stats, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A lease is valid while now < expiry; the others are returned to the free set, scored by
-- their expiry (the moment they really became free), unless the resource was removed.
local expired = redis.call('ZRANGEBYSCORE', leased, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local returned = 0
for i = 1, #expired, 2 do
  local resource = expired[i]
  redis.call('ZREM', leased, resource)
  redis.call('HDEL', tokens, resource)
  if redis.call('SISMEMBER', resources, resource) == 1 then
    redis.call('ZADD', free, expired[i + 1], resource)
    returned = returned + 1
  end
end
if #expired > 0 then
  redis.call('HINCRBY', stats, 'reclaimed', #expired / 2)
end

local head = redis.call('ZPOPMIN', free)
if #head == 0 then
  redis.call('HINCRBY', stats, 'missed', 1)
  local earliest = redis.call('ZRANGE', leased, 0, 0, 'WITHSCORES')
  local wait = -1
  if #earliest > 0 then
    wait = math.max(0, tonumber(earliest[2]) - now)
  end
  return {0, wait, redis.call('SCARD', resources)}
end

local resource = head[1]
local expiry = now + tonumber(ARGV[1])
redis.call('ZADD', leased, expiry, resource)
redis.call('HSET', tokens, resource, ARGV[2])
redis.call('HINCRBY', stats, 'acquired', 1)
-- Reclaimed resources beyond the one taken here are free: wake as many waiting clients.
if returned > 1 then
  for _ = 2, returned do
    redis.call('RPUSH', notify, 1)
  end
  redis.call('LTRIM', notify, -redis.call('SCARD', resources), -1)
  redis.call('PEXPIRE', notify, 60000)
end
return {1, resource, expiry}
