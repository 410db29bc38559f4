-- Release a lease if the caller still holds it, and wake one waiting client.
-- KEYS[1..10]: the structure's keys (lease_keys.lua names each).
-- ARGV[1] resource
-- ARGV[2] token of the caller's lease
-- Reply: 1 when released; 0 when the token does not hold the resource (another holder has it,
-- or it was released or reclaimed) or the lease ran out, in which case the resource is
-- reclaimed here and counted as such; 2 when this release was applied already (a re-send).
-- Bounded: O(log N).
-- Lost reply: safe to run twice: the release is recorded (record_call.lua) under its token,
-- and a second run replies what the first did ("already done", 2, for a release in time) and
-- changes nothing.
--#include lease_keys
--#include lease_check
--#include lease_now
--#include record_call
--#include recorded
--#include lease_wake
local NOT_HELD, RELEASED, ALREADY_RELEASED = 0, 1, 2
local leases = lease_keys(KEYS)
lease_check(leases)
local resource, token = ARGV[1], ARGV[2]
if redis.call('HGET', leases.tokens, resource) ~= token then
  -- A re-send of a release that was applied: what it replied, with "already done" for 1.
  if recorded(leases.calls, 'release:' .. token) == '1' then return ALREADY_RELEASED end
  return NOT_HELD
end
local now = lease_now()
local expiry = tonumber(redis.call('ZSCORE', leases.leased, resource))
-- Its token without its lease: only a corruption parts them (they are written together).
if not expiry then error('CORRUPT ' .. leases.leased .. ': ' .. resource .. ' has a token, no lease', 0) end
redis.call('ZREM', leases.leased, resource)
redis.call('HDEL', leases.tokens, resource)

local held = RELEASED
local free_since = now
if expiry <= now then
  held = NOT_HELD
  free_since = expiry
  redis.call('HINCRBY', leases.stats, 'reclaimed', 1)
else
  redis.call('HINCRBY', leases.stats, 'released', 1)
end
record_call(leases.calls, leases.calls_at, 'release:' .. token, held, now)
if redis.call('SISMEMBER', leases.resources, resource) == 1 then
  redis.call('ZADD', leases.free, free_since, resource)
  lease_wake(leases, 1)
end
return held
