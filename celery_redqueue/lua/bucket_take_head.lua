-- Take the head item off a key's queue of `tier`, at position `head` (the caller read its slot:
-- see bucket_head.lua), and point b.ages at the next one (the oldest head of its tiers).
-- Returns how many items the key still holds.
--#include bucket_parse_slot
--#include bucket_tier_heads
--#include bucket_queue
--#include bucket_set_tier
--#include bucket_sync_urgent
local function bucket_take_head(b, key, head, tier)
  local q = bucket_queue(key, tier)
  local remaining = tonumber(redis.call('HGET', b.tails, q) or '0') - head - 1
  redis.call('HDEL', b.items, q .. '\0' .. head)
  redis.call('HINCRBY', b.stats, 'depth', -1)
  if remaining <= 0 then
    redis.call('HDEL', b.heads, q)
    redis.call('HDEL', b.tails, q)
  else
    redis.call('HSET', b.heads, q, head + 1)
  end
  if b.priority_bound > 0 then
    if remaining <= 0 then bucket_set_tier(b, key, tier, false) end
    local _, depth, oldest = bucket_tier_heads(b, key)
    if depth <= 0 then redis.call('ZREM', b.ages, key) else redis.call('ZADD', b.ages, oldest, key) end
    bucket_sync_urgent(b, key)
    return depth
  end
  if remaining <= 0 then
    redis.call('ZREM', b.ages, key)
  else
    local _, _, at = bucket_parse_slot(redis.call('HGET', b.items, key .. '\0' .. (head + 1)))
    redis.call('ZADD', b.ages, at or 0, key)
  end
  return remaining
end
