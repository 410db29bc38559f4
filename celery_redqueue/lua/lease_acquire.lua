-- Reclaim expired leases, then lease the least recently used free resource.
-- KEYS[1..8]: the pool's keys (lease_common.lua names each).
-- ARGV[1] lease time to live, ms
-- ARGV[2] token of the new holder (unique, chosen by the caller)
-- ARGV[3] most expired leases this call reclaims
-- Reply: {1, resource, expiry_ms, fencing token} when a resource was leased, or
-- {0, ms until the earliest lease expires (-1: no lease), number of resources} when none is free.
-- Bounded: O((reclaimed + 1) * log N).
--#include lease_common
local ttl_ms, token, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local now = lease_now()
local _, returned = reclaim(limit, now)

local head = redis.call('ZPOPMIN', K_FREE)
if #head == 0 then
  redis.call('HINCRBY', K_STATS, 'missed', 1)
  local earliest = redis.call('ZRANGE', K_LEASED, 0, 0, 'WITHSCORES')
  local wait = -1
  if #earliest > 0 then
    wait = math.max(0, tonumber(earliest[2]) - now)
  end
  return {0, wait, redis.call('SCARD', K_RESOURCES)}
end

local resource = head[1]
local expiry = now + ttl_ms
redis.call('ZADD', K_LEASED, expiry, resource)
redis.call('HSET', K_TOKENS, resource, token)
redis.call('HINCRBY', K_STATS, 'acquired', 1)
local fence = next_fence(resource)
redis.call('HINCRBY', K_USES, resource, 1)
-- Reclaimed resources beyond the one taken here are free: wake as many waiting clients.
wake(returned - 1)
return {1, resource, expiry, string.format('%d', fence)}
