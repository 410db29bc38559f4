-- Take the head item off a key's queue, at position `head` (the caller read its slot: see
-- bucket_head.lua), and point b.ages at the next one. Returns how many items the key still
-- holds.
--#include bucket_parse_slot
local function bucket_take_head(b, key, head)
  local remaining = tonumber(redis.call('HGET', b.tails, key) or '0') - head - 1
  redis.call('HDEL', b.items, key .. '\0' .. head)
  redis.call('HINCRBY', b.stats, 'depth', -1)
  if remaining <= 0 then
    redis.call('HDEL', b.heads, key)
    redis.call('HDEL', b.tails, key)
    redis.call('ZREM', b.ages, key)
  else
    redis.call('HSET', b.heads, key, head + 1)
    local _, _, at = bucket_parse_slot(redis.call('HGET', b.items, key .. '\0' .. (head + 1)))
    redis.call('ZADD', b.ages, at or 0, key)
  end
  return remaining
end
