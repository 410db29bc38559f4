-- Append one item to its key's queue now (no dedupe id, no delay: the common .delay()), make
-- the key eligible, and plan the drain job it needs. bucket_enqueue does the same for batches,
-- dedupe ids and delays; this one receives less and does less, because it runs on every call:
-- an item for a key with room is kept in about nine commands, and the helpers a full key needs
-- (bucket_common's) are only defined on that path (defining them on every call added 4-5 us to
-- a call of about 20 us inside Redis 6.2, measured).
-- KEYS and ARGV[1..7]: see bucket_common.lua.
-- ARGV[8] key
-- ARGV[9] payload
-- Returns {send_drain, wake_in_ms, status} as bucket_enqueue does for one item: status 0
-- refused (key full), 1 queued, 2 queued and the key's oldest item dropped.
-- Bounded: O(log K), about nine commands (twelve when the bucket has no work due now).
--#include clock
--#include flow
local K_READY, K_TAT, K_RATES, K_ITEMS, K_HEADS, K_TAILS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_STATS, K_KEYSTATS, K_DRAINS, K_WAKE = KEYS[10], KEYS[11], KEYS[13], KEYS[14]
local K_AGES, K_SCHEDULED, K_FLOW = KEYS[15], KEYS[16], KEYS[19]
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local ordered, max_depth, lease = ARGV[3] == '1', tonumber(ARGV[4]), ARGV[6]
local key, payload = ARGV[8], ARGV[9]
if not key or not payload or not interval or not burst or not max_depth then
  return redis.error_reply('ERR bucket_enqueue_plain: bad settings, or no key or payload')
end

-- Read before writing: the key's stored rate (rate_of in bucket_schedule.lua), and whether a
-- capped key is full.
local spec = redis.call('HGET', K_RATES, key)
if spec then
  local i, b = string.match(spec, '^(%S+) (%S+)$')
  i, b = tonumber(i), tonumber(b)
  if not (i and b and i > 0 and b >= 0) then
    return redis.error_reply('ERR the rate stored for bucket key ' .. key
      .. ' is malformed; set it again (set_rate)')
  end
  interval, burst = i, b
end
if max_depth > 0 and tonumber(redis.call('HGET', K_TAILS, key) or '0')
    - tonumber(redis.call('HGET', K_HEADS, key) or '0') >= max_depth then
  -- Full: the overflow policy decides, as for bucket_enqueue.
  --#include bucket_common
  local now = now_ms()
  local id = redis.call('HINCRBY', K_STATS, 'seq', 1)
  local status = append(key, make_slot(0, id, now, payload), now)
  redis.call('HINCRBY', K_STATS, status == 0 and 'rejected' or 'enqueued', 1)
  tick(K_FLOW, 'in', 1, now)
  local send, wait = plan_bucket_drain(now)
  return {send, wait, status}
end

local now = now_ms()
local at = math.floor(now)
-- Ids need only be unique (the batch path takes them from the same field).
local id = redis.call('HINCRBY', K_STATS, 'seq', 1)
-- HINCRBY answers the new tail; the item goes at the old one (a key that emptied has no head or
-- tail field: both start again at 0).
local position = redis.call('HINCRBY', K_TAILS, key, 1) - 1
redis.call('HSET', K_ITEMS, key .. '\0' .. position, '0:' .. id .. ':' .. at .. ':' .. payload)
-- One folded counter for enqueued and depth (figures.unfold and read_flow.lua read it).
redis.call('HINCRBY', K_STATS, 'enqueued+depth', 1)
tick(K_FLOW, 'in', 1, now)

-- A key in the ready set has waiting items, so `ages` has it already (refresh_age keeps both).
local when = tonumber(redis.call('ZSCORE', K_READY, key))
if not when then
  -- NX: a key with waiting items (an ordered key with one in flight) keeps its head's time.
  redis.call('ZADD', K_AGES, 'NX', at, key)
  if not ordered
      or tonumber(redis.call('HGET', K_KEYSTATS, key .. '\0in_flight') or '0') <= 0 then
    -- eligible_at in bucket_schedule.lua (GCRA).
    local tat = tonumber(redis.call('HGET', K_TAT, key) or '0') or 0
    when = math.max(tat - burst * interval, now)
    redis.call('ZADD', K_READY, when, key)
  end
end

-- This key may go now, so the bucket has work now: arm the drain flag unless a job holds it
-- (plan_drain in drain_lease.lua).
if when and when <= now then
  if redis.call('SET', K_DRAINS, 1, 'NX', 'PX', lease) then return {1, -1, 1} end
  return {0, -1, 1}
end
-- Otherwise plan_bucket_drain (bucket_schedule.lua) and plan_drain, spelled out: the bucket's
-- next work is its first eligible key or its first due delayed item.
local next_at = nil
for _, zset in ipairs({K_READY, K_SCHEDULED}) do
  local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if #first > 0 and (next_at == nil or tonumber(first[2]) < next_at) then
    next_at = tonumber(first[2])
  end
  if next_at ~= nil and next_at <= now then break end
end
if next_at == nil then return {0, -1, 1} end
if next_at <= now then
  if redis.call('SET', K_DRAINS, 1, 'NX', 'PX', lease) then return {1, -1, 1} end
  return {0, -1, 1}
end
local scheduled = tonumber(redis.call('GET', K_WAKE) or '-1') or -1
if scheduled > now and scheduled <= next_at then return {0, -1, 1} end
local wait = math.ceil(next_at - now)
redis.call('SET', K_WAKE, string.format('%.17g', next_at), 'PX', math.max(wait, 1))
return {0, wait, 1}
