-- Shared by the bucket scripts (spliced in by the loader at "--#include bucket_common").
-- Every bucket script receives the same KEYS (see bucket.PARTS in bucket.py):
-- KEYS[1] ready      zset: key -> time (ms) since which the key may release its head item
-- KEYS[2] tat        hash: key -> theoretical arrival time (ms) of its next item (GCRA)
-- KEYS[3] rates      hash: key -> "interval_ms burst" (absent: the default rate)
-- KEYS[4] items      hash: key NUL position -> slot "receives:id:offered_at:payload"
-- KEYS[5] heads      hash: key -> position of its head item
-- KEYS[6] tails      hash: key -> position after its last item
-- KEYS[7] inflight   zset: reservation id -> deadline (ms)
-- KEYS[8] res_keys   hash: reservation id -> key
-- KEYS[9] res_items  hash: reservation id -> slot
-- KEYS[10] stats     hash: counters (seq, enqueued, rejected, dropped, processed, dead, ...)
-- KEYS[11] keystats  hash: key NUL counter -> n (in_flight, processed, dead per key)
-- KEYS[12] dead      list: dead letters, "json NL payload"
-- KEYS[13] drains    string: number of drain jobs pending; absent when none is
-- KEYS[14] wake      string: when (ms) the sleeping drain job will wake up
-- KEYS[15] ages      zset: key -> when (ms) its head item was offered (oldest waiting item)
-- KEYS[16] scheduled zset: "id key NUL payload" -> due time (ms) of a delayed item
-- KEYS[17] dedupe    zset: dedupe id -> end of its window (ms)
-- KEYS[18] done      zset: item id -> end of its processed-guard window (ms)
-- KEYS[19] flow      hash: per-second ring counters for the last minute
-- Common ARGV: [1] default interval ms, [2] default burst, [3] ordered (1|0),
-- [4] max depth per key (0: unbounded), [5] overflow (reject|drop_oldest),
-- [6] drain lease ms (see plan_drain in common.lua), [7] max receives. Script-specific ARGV start at 8.
--#include common
local K_READY, K_TAT, K_RATES, K_ITEMS, K_HEADS, K_TAILS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_INFLIGHT, K_RES_KEYS, K_RES_ITEMS, K_STATS, K_KEYSTATS = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local K_DEAD, K_DRAINS, K_WAKE, K_AGES, K_SCHEDULED = KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local K_DEDUPE, K_DONE, K_FLOW = KEYS[17], KEYS[18], KEYS[19]
local ORDERED, MAX_DEPTH, OVERFLOW = ARGV[3] == '1', tonumber(ARGV[4]), ARGV[5]
local DRAIN_TTL, MAX_RECEIVES = tonumber(ARGV[6]), tonumber(ARGV[7])

-- A key's interval (ms between releases) and burst allowance (items), or the defaults; the
-- third value is false when the key's stored rate is malformed (the defaults are used then).
local function rate_of(key)
  local spec = redis.call('HGET', K_RATES, key)
  if spec then
    local interval, burst = string.match(spec, '^(%S+) (%S+)$')
    interval, burst = tonumber(interval), tonumber(burst)
    if interval and burst and interval > 0 and burst >= 0 then return interval, burst, true end
    return tonumber(ARGV[1]), tonumber(ARGV[2]), false
  end
  return tonumber(ARGV[1]), tonumber(ARGV[2]), true
end

-- When a key may release its next item: its GCRA schedule allows it, and not before `earliest`.
-- The theoretical arrival time survives an empty queue, so a key that empties and refills
-- keeps its place in its schedule instead of becoming "eligible now".
local function eligible_at(key, earliest)
  local interval, burst = rate_of(key)
  local tat = tonumber(redis.call('HGET', K_TAT, key) or '0') or 0
  return math.max(tat - burst * interval, earliest)
end

-- A slot's parts; all nil when it is malformed (only corruption makes one).
local function parse_slot(slot)
  local receives, id, at, payload = string.match(slot or '', '^(%d+):(%d+):(%d+):(.*)$')
  if not receives then return nil, nil, nil, nil end
  return tonumber(receives), id, tonumber(at), payload
end

local function make_slot(receives, id, at, payload)
  return receives .. ':' .. id .. ':' .. string.format('%d', at) .. ':' .. payload
end

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

-- Make a key eligible if it has items, is not already, and (ordered) has none in flight.
-- `depth`: the key's depth when the caller knows it (nil: read it).
local function make_eligible(key, earliest, depth)
  if redis.call('ZSCORE', K_READY, key) or (depth or key_depth(key)) <= 0 then return nil end
  if ORDERED and tonumber(redis.call('HGET', K_KEYSTATS, key .. '\0in_flight') or '0') > 0 then
    return nil
  end
  local when = eligible_at(key, earliest)
  redis.call('ZADD', K_READY, when, key)
  return when
end

-- Append a slot to a key's queue, applying the per-key depth cap.
-- Returns status (0 refused: key full, 1 queued, 2 queued and the key's oldest item dropped)
-- and the time the key became eligible (nil when it already was, or is busy).
-- The key's head and tail are read once: enqueue calls this for every item.
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

-- Forget a reservation; returns its key and slot, or nil when it is not held.
local function take_reservation(reservation)
  local key = redis.call('HGET', K_RES_KEYS, reservation)
  if not key then return nil, nil end
  local slot = redis.call('HGET', K_RES_ITEMS, reservation)
  redis.call('ZREM', K_INFLIGHT, reservation)
  redis.call('HDEL', K_RES_KEYS, reservation)
  redis.call('HDEL', K_RES_ITEMS, reservation)
  redis.call('HINCRBY', K_STATS, 'in_flight', -1)
  redis.call('HINCRBY', K_KEYSTATS, key .. '\0in_flight', -1)
  return key, slot
end

-- Append a dead letter with its key, id, receives and the text of its last failure (a
-- malformed slot is kept whole as the payload).
local function bury(key, slot, err, now)
  local receives, id, at, payload = parse_slot(slot)
  if not receives then receives, id, at, payload = 0, nil, now, slot or '' end
  local info = cjson.encode({key = key, id = tonumber(id), receives = receives, error = err,
                             at = now, offered_at = at})
  redis.call('RPUSH', K_DEAD, info .. '\n' .. payload)
  redis.call('HINCRBY', K_STATS, 'dead', 1)
  redis.call('HINCRBY', K_KEYSTATS, key .. '\0dead', 1)
end

-- When the bucket next has work: the earliest of the first eligible key and the first due
-- delayed item (nil: none). Then plan the drain job that work needs (common.lua). A key
-- eligible now settles it: the delayed set is not read then.
local function plan_bucket_drain(now)
  local next_at = nil
  for _, zset in ipairs({K_READY, K_SCHEDULED}) do
    local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
    if #first > 0 and (next_at == nil or tonumber(first[2]) < next_at) then
      next_at = tonumber(first[2])
    end
    if next_at ~= nil and next_at <= now then break end
  end
  return plan_drain(K_DRAINS, K_WAKE, DRAIN_TTL, now, next_at)
end

-- Arm the drain flag unless a job holds it; 1 means "send one now" (a job that then finds
-- nothing eligible yet schedules itself). For callers that cannot pass on a countdown.
local function arm_drain(now)
  return (plan_drain(K_DRAINS, K_WAKE, DRAIN_TTL, now, now))
end
