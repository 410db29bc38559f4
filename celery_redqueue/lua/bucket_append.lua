-- Append a slot to a key's queue, applying the per-key depth cap (b.max_depth, b.overflow).
-- Returns a status, REFUSED (key full), QUEUED or DROPPED (queued and the key's oldest item
-- dropped; bucket_statuses.lua), and the time the key became eligible (nil when it already
-- was, or is busy). The key's head and tail are read once: enqueue calls this for every item.
--#include bucket_statuses
--#include bucket_parse_slot
--#include bucket_make_eligible
local function bucket_append(b, key, slot, now)
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
