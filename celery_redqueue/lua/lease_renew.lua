-- Extend a lease the caller still holds.
-- KEYS[1..10]: the structure's keys (lease_keys.lua names each).
-- ARGV[1] resource
-- ARGV[2] token of the caller's lease
-- ARGV[3] new time to live, ms from now
-- Reply: the new expiry (ms), or 0 when the token does not hold the resource or the lease has
-- already run out (the next acquire or reclaim takes it back). Bounded: O(log N).
-- Lost reply: safe to run twice (a second run sets the same expiry again, counted as one more
-- renewal)
--#include lease_keys
--#include lease_check
--#include lease_now
local leases = lease_keys(KEYS)
lease_check(leases)
local resource, token, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('HGET', leases.tokens, resource) ~= token then
  return 0
end
local now = lease_now()
local expiry = tonumber(redis.call('ZSCORE', leases.leased, resource) or '0')
if expiry <= now then
  return 0
end
expiry = now + ttl_ms
redis.call('ZADD', leases.leased, 'XX', expiry, resource)
redis.call('HINCRBY', leases.stats, 'renewed', 1)
return expiry
