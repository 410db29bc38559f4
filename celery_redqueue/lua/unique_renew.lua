-- Extend the lease of a lock the caller still holds.
-- KEYS[1..5]: the lock table's keys (unique_keys.lua names each).
-- ARGV[1] lock key
-- ARGV[2] token of the caller's lease
-- ARGV[3] new time to live, ms from now
-- Reply: the new expiry (ms), or 0 when the token no longer holds the key (released, taken
-- over, or run out). Bounded: O(log N).
-- Lost reply: safe to run twice (a second run sets the same expiry again, counted as one more
-- renewal)
--#include unique_keys
--#include unique_check
--#include unique_entry
--#include lease_now
local locks = unique_keys(KEYS)
unique_check(locks)
local key, token, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not ttl_ms or ttl_ms <= 0 then
  return redis.error_reply('ERR unique_renew: bad ttl')
end
local raw = redis.call('HGET', locks.held, key)
if not raw or unique_entry(locks, key, raw).token ~= token then
  return 0
end
local now = lease_now()
if tonumber(redis.call('ZSCORE', locks.expiry, key) or '0') <= now then
  return 0
end
redis.call('ZADD', locks.expiry, 'XX', now + ttl_ms, key)
redis.call('HINCRBY', locks.stats, 'renewed', 1)
return now + ttl_ms
