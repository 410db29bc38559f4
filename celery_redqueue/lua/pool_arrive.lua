-- `entries` entries arrived in `slot` at `at` ms (spliced in at "--#include pool_arrive"):
-- `arrivals` (hash: slot -> entries waiting) counts them, and a slot that was empty enters
-- `ages` (zset: slot -> its first arrival; the lowest is the oldest waiting call).
local function pool_arrive(ages, arrivals, slot, at, entries)
  if redis.call('HINCRBY', arrivals, slot, entries) == entries then
    redis.call('ZADD', ages, at, slot)
  end
end
