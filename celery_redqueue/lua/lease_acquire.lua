-- Reclaim expired leases, then lease the least recently used free resource.
-- KEYS[1..10]: the structure's keys (lease_keys.lua names each).
-- ARGV[1] lease time to live, ms
-- ARGV[2] token of the new holder (unique, chosen by the caller)
-- ARGV[3] most expired leases this call reclaims
-- Reply: {LEASED (1), resource, expiry_ms, fencing token} when a resource was leased, or
-- {NONE_FREE (0), ms until the earliest lease expires (-1: no lease), number of resources} when none is free.
-- Bounded: O((reclaimed + 1) * log N).
-- Lost reply: safe to run twice: an acquire whose token holds a lease already replies that
-- lease again (same resource, expiry and fencing token) and takes nothing.
--#include lease_keys
--#include lease_check
--#include lease_now
--#include record_call
--#include recorded
--#include lease_take_back
--#include lease_next_fence
--#include lease_wake
local LEASED, NONE_FREE = 1, 0
local leases = lease_keys(KEYS)
lease_check(leases)
local ttl_ms, token, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local now = lease_now()
local mine = recorded(leases.calls, 'acquire:' .. token)
if mine and redis.call('HGET', leases.tokens, mine) == token then
  -- A re-sent acquire: its first run's reply was lost. The same lease again.
  return {LEASED, mine, tonumber(redis.call('ZSCORE', leases.leased, mine)), redis.call('HGET', leases.fences, mine)}
end
local _, returned = lease_take_back(leases, limit, now)

local head = redis.call('ZPOPMIN', leases.free)
if #head == 0 then
  redis.call('HINCRBY', leases.stats, 'missed', 1)
  local earliest = redis.call('ZRANGE', leases.leased, 0, 0, 'WITHSCORES')
  local wait = -1
  if #earliest > 0 then
    wait = math.max(0, tonumber(earliest[2]) - now)
  end
  return {NONE_FREE, wait, redis.call('SCARD', leases.resources)}
end

local resource = head[1]
local expiry = now + ttl_ms
redis.call('ZADD', leases.leased, expiry, resource)
redis.call('HSET', leases.tokens, resource, token)
record_call(leases.calls, leases.calls_at, 'acquire:' .. token, resource, now)
redis.call('HINCRBY', leases.stats, 'acquired', 1)
local fence = lease_next_fence(leases, resource)
-- A use count that is not an integer (a corruption) is a figure lost, reset: the lease is
-- granted already.
if type(redis.pcall('HINCRBY', leases.uses, resource, 1)) ~= 'number' then
  redis.call('HSET', leases.uses, resource, 1)
end
-- Reclaimed resources beyond the one taken here are free: wake as many waiting clients.
lease_wake(leases, returned - 1)
return {LEASED, resource, expiry, string.format('%d', fence)}
