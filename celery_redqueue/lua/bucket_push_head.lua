-- Put a slot back at the head of its key's queue (a released or reaped item).
--#include bucket_refresh_age
local function bucket_push_head(b, key, slot)
  local head = redis.call('HINCRBY', b.heads, key, -1)
  redis.call('HSET', b.items, key .. '\0' .. head, slot)
  redis.call('HINCRBY', b.stats, 'depth', 1)
  bucket_refresh_age(b, key)
end
