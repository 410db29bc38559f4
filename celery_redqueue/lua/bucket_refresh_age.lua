-- Keep b.ages pointing at the key's head item (or drop the key when its queue is empty).
--#include bucket_parse_slot
local function bucket_refresh_age(b, key)
  local slot = redis.call('HGET', b.items, key .. '\0' .. (redis.call('HGET', b.heads, key) or '0'))
  if not slot then return redis.call('ZREM', b.ages, key) end
  redis.call('ZADD', b.ages, select(3, bucket_parse_slot(slot)) or 0, key)
end
