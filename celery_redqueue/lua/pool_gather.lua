-- Should a drain pop now, or let calls gather first (pool_batch_wait)? Read-mostly: writes only
-- the drain flag and the wake-up when it says "wait".
-- KEYS: these of pool_keys.lua's, as this line names them:
-- Parts: items ages drains wake
-- ARGV[1..4]: common (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] calls that make a batch worth popping at once (pool_batch_min)
-- ARGV[6] ms a batch may gather after its oldest call arrived (pool_batch_wait)
-- ARGV[7] longest ms before the waiting drain looks again (so a batch that fills early runs)
-- Reply: {wait_ms, schedule}. wait_ms 0: pop now (also for an empty pool: the pop then ends
-- the drain as usual). Else look again in wait_ms: the flag is held until then plus a lease (so
-- calls arriving meanwhile send no drain job), and schedule 1 asks the caller to send one drain
-- job with that countdown (0: one is scheduled no later). O(log N).
-- Lost reply: safe to run twice (reads, and re-arms the same flag and wake-up)
--#include clock
--#include plan_drain
--#include check_keys
local K_ITEMS, K_AGES, K_DRAINS, K_WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease, min_calls, wait, check =
  tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if not (min_calls and wait and check and lease) or check < 1 then
  return redis.error_reply('ERR pool_gather: bad arguments')
end
check_keys({K_ITEMS, 'zset', K_AGES, 'zset', K_DRAINS, 'string', K_WAKE, 'string'})
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
-- The next look is work due later: one drain job for it unless one is scheduled no later.
local _, schedule_in = plan_drain(K_DRAINS, K_WAKE, lease, now, now + countdown)
return {countdown, schedule_in >= 0 and 1 or 0}
