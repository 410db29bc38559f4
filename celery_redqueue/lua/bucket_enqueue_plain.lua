-- Append one item to its key's queue now (no dedupe id, no delay: the common .delay()), make
-- the key eligible, and plan the drain job it needs. bucket_enqueue does the same for batches,
-- dedupe ids and delays; this one receives less and does less, because it runs on every call:
-- an item for a key with room is kept in about nine commands. It uses the rate, schedule, slot
-- and drain helpers every bucket script uses; the rest of bucket_common's (queue surgery,
-- reservations) is only defined on a full key's path (defining it on every call added 4-5 us to
-- a call of about 20 us inside Redis 6.2; the helpers defined here cost about 0.7 us, measured).
-- KEYS and ARGV[1..7]: see bucket_common.lua.
-- ARGV[8] key
-- ARGV[9] payload
-- ARGV[10] cost ('' or absent: none; a bucket with bucket_cost gives every call one)
-- Returns {send_drain, wake_in_ms, status} as bucket_enqueue does for one item: status 0
-- refused (key full), 1 queued, 2 queued and the key's oldest item dropped.
-- Bounded: O(log K), about nine commands (twelve when the bucket has no work due now).
-- Lost reply: raises (a store: a second run would queue the item twice)
--#include clock
--#include flow
--#include drain_lease
--#include wake_signal
-- The keys and settings bucket_schedule's helpers use, named as bucket_common.lua names them.
local K_READY, K_TAT, K_RATES, K_ITEMS, K_HEADS, K_TAILS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_STATS, K_KEYSTATS, K_DRAINS, K_WAKE = KEYS[10], KEYS[11], KEYS[13], KEYS[14]
local K_AGES, K_SCHEDULED, K_FLOW, K_PAUSED = KEYS[15], KEYS[16], KEYS[19], KEYS[20]
local K_SIGNAL, K_LISTENING = KEYS[25], KEYS[26]
local DEFAULT_INTERVAL, DEFAULT_BURST = tonumber(ARGV[1]), tonumber(ARGV[2])
local MAX_DEPTH, DRAIN_LEASE_MS = tonumber(ARGV[4]), tonumber(ARGV[6])
--#include bucket_limits
--#include bucket_schedule
--#include bucket_slot
local key, payload, cost_arg = ARGV[8], ARGV[9], ARGV[10] or ''
if not key or not payload or not DEFAULT_INTERVAL or not DEFAULT_BURST or not MAX_DEPTH then
  return redis.error_reply('ERR bucket_enqueue_plain: bad settings, or no key or payload')
end
local cost = tonumber(cost_arg)
if cost_arg ~= '' then
  local limit = select(3, cost_rate_of(key))
  if not cost or cost < 0 then return redis.error_reply('ERR bucket_enqueue_plain: bad cost') end
  -- A key's own cost rate may allow less in one period than the bucket's (checked by the caller).
  if limit > 0 and cost > limit then
    return redis.error_reply('ERR bucket cost ' .. cost_arg .. ' of key ' .. key
      .. ' exceeds what its cost rate allows in one period (' .. limit .. ')')
  end
end

-- Read before writing: the key's stored rate, and whether a capped key is full.
local interval, burst, rate_ok = rate_of(key)
if not rate_ok then
  return redis.error_reply('ERR the rate stored for bucket key ' .. key
    .. ' is malformed; set it again (set_rate)')
end
if MAX_DEPTH > 0 and tonumber(redis.call('HGET', K_TAILS, key) or '0')
    - tonumber(redis.call('HGET', K_HEADS, key) or '0') >= MAX_DEPTH then
  -- Full: the overflow policy decides, as for bucket_enqueue.
  --#include bucket_common
  local now = now_ms()
  local id = redis.call('HINCRBY', K_STATS, 'seq', 1)
  local status = append(key, make_slot(0, id, now, payload, cost), now)
  redis.call('HINCRBY', K_STATS, status == 0 and 'rejected' or 'enqueued', 1)
  tick(K_FLOW, 'in', 1, now)
  local send, wait = plan_bucket_drain(now)
  return {send, wait, status}
end

local now = now_ms()
-- Ids need only be unique (the batch path takes them from the same field).
local id = redis.call('HINCRBY', K_STATS, 'seq', 1)
-- HINCRBY answers the new tail; the item goes at the old one (a key that emptied has no head or
-- tail field: both start again at 0).
local position = redis.call('HINCRBY', K_TAILS, key, 1) - 1
redis.call('HSET', K_ITEMS, key .. '\0' .. position, make_slot(0, id, now, payload, cost))
-- One folded counter for enqueued and depth (figures.unfold and read_flow.lua read it).
redis.call('HINCRBY', K_STATS, 'enqueued+depth', 1)
tick(K_FLOW, 'in', 1, now)

-- A key in the ready set has waiting items, so `ages` has it already (refresh_age keeps both).
local when = tonumber(redis.call('ZSCORE', K_READY, key))
if not when then
  -- NX: a key with waiting items (one at its concurrency limit) keeps its head's time.
  redis.call('ZADD', K_AGES, 'NX', math.floor(now), key)
  if not at_capacity(key) then
    when = math.max(scheduled_at(key, interval, burst, now), limits_at(key))
    -- A key paused until resumed stays out of the ready set.
    if when < math.huge then redis.call('ZADD', K_READY, when, key) else when = nil end
  end
end

-- A listener waiting on the wake signal looks again (this key may go before what it waits for)
-- and takes it, or (a key not eligible yet) its poll plans the wake-up: no job here.
if wake_listener(K_LISTENING, K_SIGNAL, DRAIN_LEASE_MS, now) then return {0, -1, 1} end
-- This key may go now, so the bucket has work now: arm the drain flag unless a job holds it.
-- Otherwise the bucket's next work decides (its first eligible key or due delayed item).
if when and when <= now then return {arm_drain(now), -1, 1} end
local send, wait = plan_bucket_drain(now)
return {send, wait, 1}
