-- Put a slot back at the head of its key's queue (a released or reaped item); b.ages then
-- points at it.
--#include bucket_parse_slot
local function bucket_push_head(b, key, slot)
  local head = redis.call('HINCRBY', b.heads, key, -1)
  redis.call('HSET', b.items, key .. '\0' .. head, slot)
  redis.call('HINCRBY', b.stats, 'depth', 1)
  redis.call('ZADD', b.ages, select(3, bucket_parse_slot(slot)) or 0, key)
end
