-- Should a drain pop now, or let calls gather first (pool_batch_wait)? Read-mostly: writes only
-- the drain flag and the wake-up when it says "wait".
-- KEYS[1] items   zset: the pool's entries
-- KEYS[2] ages    zset: member -> when (ms) it was first offered
-- KEYS[3] drains  the drain flag (a count of pending or running drain jobs, with a lease)
-- KEYS[4] wake    "a drain job is scheduled for <ms>"; vanishes at that moment
-- ARGV[1] calls that make a batch worth popping at once (pool_batch_min)
-- ARGV[2] ms a batch may gather after its oldest call arrived (pool_batch_wait)
-- ARGV[3] longest ms before the waiting drain looks again (so a batch that fills early runs)
-- ARGV[4] drain lease ms
-- Reply: {wait_ms, schedule}. wait_ms 0: pop now (also for an empty pool: the pop then ends
-- the drain as usual). Else look again in wait_ms: the flag is held until then plus a lease (so
-- calls arriving meanwhile send no drain job), and schedule 1 asks the caller to send one drain
-- job with that countdown (0: one is scheduled no later). O(log N).
--#include clock
local K_ITEMS, K_AGES, K_DRAINS, K_WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local min_calls, wait, check, lease =
  tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not (min_calls and wait and check and lease) or check < 1 then
  return redis.error_reply('ERR pool_gather: bad arguments')
end
local n = redis.call('ZCARD', K_ITEMS)
if n == 0 or n >= min_calls then return {0, 0} end
local oldest = redis.call('ZRANGE', K_AGES, 0, 0, 'WITHSCORES')
if #oldest < 2 then return {0, 0} end
local now = math.floor(now_ms())
local left = math.ceil(tonumber(oldest[2]) + wait - now)
if left <= 0 then return {0, 0} end
local countdown = math.min(left, check)
local hold = countdown + lease
if redis.call('PTTL', K_DRAINS) < hold then
  if redis.call('EXISTS', K_DRAINS) == 1 then
    redis.call('PEXPIRE', K_DRAINS, hold)
  else
    redis.call('SET', K_DRAINS, 1, 'PX', hold)
  end
end
local scheduled = tonumber(redis.call('GET', K_WAKE) or '-1') or -1
if scheduled >= 0 and scheduled <= now + countdown then return {countdown, 0} end
redis.call('SET', K_WAKE, now + countdown, 'PX', countdown)
return {countdown, 1}
