-- Append one item to its key's queue now (no dedupe id, no delay: the common .delay()), make
-- the key eligible, and plan the drain job it needs. bucket_enqueue does the same for batches,
-- dedupe ids and delays; this one receives less and does less, because it runs on every call:
-- an item for a key with room is kept in about nine commands. A full capped key refuses the
-- item here (overflow 'reject', the default: counted, nothing stored). Under 'drop_oldest' it
-- is left to bucket_enqueue (bucket_append.lua): this script stores nothing and replies FULL,
-- and the caller sends the item there (defining that path's helpers here cost every call
-- about 1 us, measured).
-- Why a twin (kept only where it buys more than 10 % on the producer): bench/bucket_twin.py,
-- same run, 100 keys, idle 2-core machine, four runs: 8.0, 13.9, 14.2 and 10.5 % less time
-- per call than bucket_enqueue (e.g. 196.6 against 229.2 us), 20-25 % less server time per
-- script (64.5 against 83.3 us). Borderline: re-measure when either script changes.
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] key
-- ARGV[9] payload
-- ARGV[10] cost ('' or absent: none; a bucket with bucket_cost gives every call one)
-- Returns {send_drain, wake_in_ms, status} as bucket_enqueue does for one item: status
-- QUEUED, REFUSED (a full key under 'reject'), or FULL (a full key under 'drop_oldest':
-- nothing stored, send it through bucket_enqueue; send_drain 0).
-- Bounded: O(log K), about nine commands (twelve when the bucket has no work due now).
-- Lost reply: raises (a store: a second run would queue the item twice)
--#include bucket_keys
--#include clock
--#include tick
--#include plan_drain
--#include wake_listener
--#include bucket_statuses
--#include bucket_rate
--#include bucket_cost_rate
--#include bucket_make_slot
--#include bucket_at_capacity
--#include bucket_limits_at
--#include bucket_plan_drain
--#include check_keys
local b = bucket_keys(KEYS, ARGV)
-- A bucket with priority tiers keeps tier-0 calls in sub-queues of their keys as well: the
-- general script stores them (FULL sends the caller there; nothing is written here).
if b.priority_bound > 0 then return {0, -1, FULL} end
-- What it reads or writes, before its first read of a key (check_keys.lua: a key of another
-- type, or a counter it adds to that is not an integer, is CORRUPT and nothing is written).
check_keys({b.ready, 'zset', b.rates, 'hash', b.items, 'hash', b.heads, 'hash', b.tails, 'hash',
  b.tat, 'hash', b.ages, 'zset', b.paused, 'zset', b.keystats, 'hash', b.flow, 'hash',
  b.drains, 'string', b.wake, 'string', b.listening, 'zset', b.signal, 'list', b.scheduled, 'zset'},
  b.stats)
-- The key's own counters it reads or adds to (not every key's: bounded).
local fields = {b.heads, ARGV[8], b.tails, ARGV[8], b.keystats, (ARGV[8] or '') .. '\0in_flight'}
for i = 1, ARGV[8] and #fields or 0, 2 do
  local v = redis.call('HGET', fields[i], fields[i + 1])
  if v and not string.match(v, '^%-?%d+$') then
    error(string.format('CORRUPT %s field %q: %q is not an integer', fields[i], fields[i + 1], v), 0)
  end
end
local key, payload, cost_arg = ARGV[8], ARGV[9], ARGV[10] or ''
if not key or not payload or not b.interval or not b.burst or not b.max_depth then
  return redis.error_reply('ERR bucket_enqueue_plain: bad settings, or no key or payload')
end
local cost = tonumber(cost_arg)
if cost_arg ~= '' then
  local limit = select(3, bucket_cost_rate(b, key))
  if not cost or cost < 0 then return redis.error_reply('ERR bucket_enqueue_plain: bad cost') end
  -- A key's own cost rate may allow less in one period than the bucket's (checked by the caller).
  if limit > 0 and cost > limit then
    return redis.error_reply('ERR bucket cost ' .. cost_arg .. ' of key ' .. key
      .. ' exceeds what its cost rate allows in one period (' .. limit .. ')')
  end
end

-- Read before writing: the key's stored rate, and whether a capped key is full.
local interval, burst, rate_ok = bucket_rate(b, key)
if not rate_ok then
  return redis.error_reply('ERR the rate stored for bucket key ' .. key
    .. ' is malformed; set it again (set_rate)')
end
if b.max_depth > 0 and tonumber(redis.call('HGET', b.tails, key) or '0')
    - tonumber(redis.call('HGET', b.heads, key) or '0') >= b.max_depth then
  if b.overflow == 'drop_oldest' then return {0, -1, FULL} end
  -- Refused here, counted as bucket_enqueue counts it: shedding load costs one round trip.
  -- It takes an id as bucket_enqueue does for every item, so both leave the same state.
  local now = now_ms()
  redis.call('HINCRBY', b.stats, 'seq', 1)
  redis.call('HINCRBY', b.stats, 'rejected', 1)
  tick(b.flow, 'in', 1, now)
  local send, wait = bucket_plan_drain(b, now)
  return {send, wait, REFUSED}
end

local now = now_ms()
-- Ids need only be unique (the batch path takes them from the same field).
local id = redis.call('HINCRBY', b.stats, 'seq', 1)

-- HINCRBY answers the new tail; the item goes at the old one (a key that emptied has no head or
-- tail field: both start again at 0).
local position = redis.call('HINCRBY', b.tails, key, 1) - 1
redis.call('HSET', b.items, key .. '\0' .. position, bucket_make_slot(0, id, now, payload, cost))
-- One folded counter for enqueued and depth (figures.unfold and read_flow.lua read it).
redis.call('HINCRBY', b.stats, 'enqueued+depth', 1)
tick(b.flow, 'in', 1, now)

-- A key in the ready set has waiting items, so `ages` has it already (bucket_take_head and bucket_push_head keep both).
local when = tonumber(redis.call('ZSCORE', b.ready, key))
if not when then
  -- NX: a key with waiting items (one at its concurrency limit) keeps its head's time.
  redis.call('ZADD', b.ages, 'NX', math.floor(now), key)
  if not bucket_at_capacity(b, key) then
    local tat = tonumber(redis.call('HGET', b.tat, key) or '0') or 0
    when = math.max(tat - burst * interval, now, bucket_limits_at(b, key, now))
    -- A key paused until resumed stays out of the ready set.
    if when < math.huge then redis.call('ZADD', b.ready, when, key) else when = nil end
  end
end

-- A listener waiting on the wake signal looks again (this key may go before what it waits for)
-- and takes it, or (a key not eligible yet) its poll plans the wake-up: no job here.
if wake_listener(b.listening, b.signal, b.lease, now) then return {0, -1, QUEUED} end
-- This key may go now, so the bucket has work now: arm the drain flag unless a job holds it.
-- Otherwise the bucket's next work decides (its first eligible key or due delayed item).
if when and when <= now then return {(plan_drain(b.drains, b.wake, b.lease, now, now)), -1, QUEUED} end
local send, wait = bucket_plan_drain(b, now)
return {send, wait, QUEUED}
