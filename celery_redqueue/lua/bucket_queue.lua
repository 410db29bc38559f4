-- Each key's FIFO queue: slots, depth, head and tail, eligibility (spliced in by
-- bucket_common.lua, after bucket_schedule).

--#include bucket_slot

local function key_depth(key)
  return tonumber(redis.call('HGET', K_TAILS, key) or '0') - tonumber(redis.call('HGET', K_HEADS, key) or '0')
end

-- Keep `ages` pointing at the key's head item (or drop the key when its queue is empty).
local function refresh_age(key)
  local head = redis.call('HGET', K_HEADS, key) or '0'
  local slot = redis.call('HGET', K_ITEMS, key .. '\0' .. head)
  if slot then
    local _, _, at = parse_slot(slot)
    redis.call('ZADD', K_AGES, at or 0, key)
  else
    redis.call('ZREM', K_AGES, key)
  end
end

-- Make a key eligible if it has items, is not already, has room for another call in flight
-- (bucket_concurrency; an ordered key has none while one is) and is not paused until resumed.
-- `depth`: the key's depth when the caller knows it (nil: read it).
local function make_eligible(key, earliest, depth)
  if redis.call('ZSCORE', K_READY, key) or (depth or key_depth(key)) <= 0 then return nil end
  if at_capacity(key) then return nil end
  local when = eligible_at(key, earliest)
  if when == math.huge then return nil end
  redis.call('ZADD', K_READY, when, key)
  return when
end

-- Append a slot to a key's queue, applying the per-key depth cap.
-- Returns status (0 refused: key full, 1 queued, 2 queued and the key's oldest item dropped)
-- and the time the key became eligible (nil when it already was, or is busy). The key's head
-- and tail are read once: enqueue calls this for every item.
local function append(key, slot, now)
  local head = tonumber(redis.call('HGET', K_HEADS, key) or '0')
  local tail = tonumber(redis.call('HGET', K_TAILS, key) or '0')
  local status = 1
  if MAX_DEPTH > 0 and tail - head >= MAX_DEPTH then
    if OVERFLOW ~= 'drop_oldest' then
      return 0, nil
    end
    redis.call('HDEL', K_ITEMS, key .. '\0' .. head)
    head = redis.call('HINCRBY', K_HEADS, key, 1)
    redis.call('HINCRBY', K_STATS, 'dropped', 1)
    status = 2
  end
  redis.call('HINCRBY', K_TAILS, key, 1)
  redis.call('HSET', K_ITEMS, key .. '\0' .. tail, slot)
  -- A dropped item and the new one leave the depth as it was.
  if status == 1 then redis.call('HINCRBY', K_STATS, 'depth', 1) end
  local depth = tail + 1 - head
  if status == 2 then
    refresh_age(key)
  elseif depth == 1 then
    -- The new item is the head: its offered time is in the slot.
    local _, _, at = parse_slot(slot)
    redis.call('ZADD', K_AGES, at or now, key)
  end
  return status, make_eligible(key, now, depth)
end

-- Put a slot back at the head of its key's queue (a released or reaped item).
local function push_head(key, slot)
  local head = redis.call('HINCRBY', K_HEADS, key, -1)
  redis.call('HSET', K_ITEMS, key .. '\0' .. head, slot)
  redis.call('HINCRBY', K_STATS, 'depth', 1)
  refresh_age(key)
end
