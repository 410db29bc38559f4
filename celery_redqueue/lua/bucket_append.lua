-- Append a slot to a key's queue (of the slot's tier), applying the per-key depth cap
-- (b.max_depth over all its tiers, b.overflow).
-- Returns a status, REFUSED (key full), QUEUED or DROPPED (queued and the key's oldest item
-- dropped: on a bucket with priority tiers, the oldest head of its tiers; bucket_statuses.lua),
-- and the time the key became eligible (nil when it already was, or is busy). Without tiers the
-- key's head and tail are read once: enqueue calls this for every item.
--#include bucket_statuses
--#include bucket_parse_slot
--#include bucket_make_eligible
--#include bucket_tier_heads
--#include bucket_queue
--#include bucket_set_tier
--#include bucket_sync_urgent
local function bucket_append(b, key, slot, now)
  if b.priority_bound > 0 then
    local tier, status = select(7, bucket_parse_slot(slot)) or 0, QUEUED
    local rows, depth, oldest = bucket_tier_heads(b, key)
    if b.max_depth > 0 and depth >= b.max_depth then
      if b.overflow ~= 'drop_oldest' then return REFUSED, nil end
      for _, row in ipairs(rows) do if row[4] == oldest then rows = row break end end
      local q = bucket_queue(key, rows[1])
      redis.call('HDEL', b.items, q .. '\0' .. rows[2]) redis.call('HINCRBY', b.heads, q, 1)
      if rows[3] - rows[2] <= 1 then redis.call('HDEL', b.heads, q) redis.call('HDEL', b.tails, q) bucket_set_tier(b, key, rows[1], false) end
      redis.call('HINCRBY', b.stats, 'evicted', 1) redis.call('HINCRBY', b.stats, 'depth', -1)
      status, depth = DROPPED, depth - 1
    end
    local q = bucket_queue(key, tier)
    redis.call('HSET', b.items, q .. '\0' .. (redis.call('HINCRBY', b.tails, q, 1) - 1), slot)
    redis.call('HINCRBY', b.stats, 'depth', 1) bucket_set_tier(b, key, tier, true) bucket_sync_urgent(b, key)
    redis.call('ZADD', b.ages, select(3, bucket_tier_heads(b, key)) or now, key)
    return status, bucket_make_eligible(b, key, now, depth + 1)
  end
  local head = tonumber(redis.call('HGET', b.heads, key) or '0')
  local tail = tonumber(redis.call('HGET', b.tails, key) or '0')
  local status = QUEUED
  if b.max_depth > 0 and tail - head >= b.max_depth then
    if b.overflow ~= 'drop_oldest' then return REFUSED, nil end
    redis.call('HDEL', b.items, key .. '\0' .. head)
    head = redis.call('HINCRBY', b.heads, key, 1)
    redis.call('HINCRBY', b.stats, 'evicted', 1)
    status = DROPPED
  end
  redis.call('HINCRBY', b.tails, key, 1)
  redis.call('HSET', b.items, key .. '\0' .. tail, slot)
  local depth = tail + 1 - head
  if status == DROPPED then
    -- A dropped item and the new one leave the depth as it was; b.ages follows the new head.
    local _, _, at = bucket_parse_slot(redis.call('HGET', b.items, key .. '\0' .. head))
    redis.call('ZADD', b.ages, at or 0, key)
  else
    redis.call('HINCRBY', b.stats, 'depth', 1)
    -- The new item is the head: its offered time is in the slot.
    if depth == 1 then redis.call('ZADD', b.ages, select(3, bucket_parse_slot(slot)) or now, key) end
  end
  return status, bucket_make_eligible(b, key, now, depth)
end
