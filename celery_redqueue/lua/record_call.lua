-- Call records (spliced in at "--#include record_call"): what a state-changing call did, kept
-- for a minute under the caller's id, so that a re-send of the same call (its first reply was
-- lost on the way) finds it and replies the same instead of running again. Two keys per
-- structure: a hash `records` (call id -> what it did) and a zset `expiry` (call id -> end ms).

-- Record `value` for call `id`, forgetting up to 100 records that expired (bounded work).
local RECORD_MS = 60000
local function record_call(records, expiry, id, value, now)
  local old = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then
    redis.call('ZREM', expiry, unpack(old))
    redis.call('HDEL', records, unpack(old))
  end
  redis.call('HSET', records, id, value)
  redis.call('ZADD', expiry, now + RECORD_MS, id)
end
