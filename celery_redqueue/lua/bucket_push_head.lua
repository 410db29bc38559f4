-- Put a slot back at the head of its key's queue (of its tier: a released or reaped item);
-- b.ages then points at it (the oldest head of the key's tiers).
--#include bucket_parse_slot
--#include bucket_queue
--#include bucket_set_tier
--#include bucket_sync_urgent
local function bucket_push_head(b, key, slot)
  local tier = b.priority_bound > 0 and select(7, bucket_parse_slot(slot)) or 0
  local q = bucket_queue(key, tier)
  local head = redis.call('HINCRBY', b.heads, q, -1)
  redis.call('HSET', b.items, q .. '\0' .. head, slot)
  redis.call('HINCRBY', b.stats, 'depth', 1)
  local at = select(3, bucket_parse_slot(slot)) or 0
  if b.priority_bound > 0 then
    bucket_set_tier(b, key, tier, true) bucket_sync_urgent(b, key)
    at = math.min(at, tonumber(redis.call('ZSCORE', b.ages, key) or '') or at)
  end
  redis.call('ZADD', b.ages, at, key)
end
