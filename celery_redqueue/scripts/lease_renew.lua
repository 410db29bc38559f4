-- Extend a lease the caller still holds.
-- KEYS[1] leased  zset: leased resource -> lease expiry (ms, server clock)
-- KEYS[2] tokens  hash: leased resource -> token of its holder
-- KEYS[3] stats   hash: counters
-- ARGV[1] resource
-- ARGV[2] token of the caller's lease
-- ARGV[3] new time to live, ms from now
-- Returns the new expiry (ms), or 0 when the token does not hold the resource or the lease has
-- already run out (the next acquire or reclaim takes it back). Bounded: O(log N).
local leased, tokens, stats = KEYS[1], KEYS[2], KEYS[3]
local resource, token = ARGV[1], ARGV[2]
if redis.call('HGET', tokens, resource) ~= token then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = tonumber(redis.call('ZSCORE', leased, resource) or '0')
if expiry <= now then
  return 0
end
expiry = now + tonumber(ARGV[3])
redis.call('ZADD', leased, 'XX', expiry, resource)
redis.call('HINCRBY', stats, 'renewed', 1)
return expiry
