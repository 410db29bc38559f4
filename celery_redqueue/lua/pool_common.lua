-- Shared by the pool scripts (spliced in by the loader at "--#include pool_common").
-- Every pool script receives the same KEYS (see pool.PARTS in pool.py), except pool_add, which
-- receives only the first ten (what it touches):
-- KEYS[1] items           zset: member -> score (lowest popped first; sample evicts the highest)
-- KEYS[2] counts          hash: member -> merged calls (coalescing pools)
-- KEYS[3] stats           hash: counters
-- KEYS[4] drains          string: number of drain jobs pending; absent when none is
-- KEYS[5] receives        hash: member -> times handed out so far (returned entries only)
-- KEYS[6] ages            zset: member -> when (ms) it was first offered
-- KEYS[7] scheduled       zset: "id:score:payload" -> due time (ms)
-- KEYS[8] dedupe          zset: dedupe id -> end of its window (ms)
-- KEYS[9] flow            hash: per-second ring counters for the last minute
-- KEYS[10] wake           string: when (ms) a sleeping drain job wakes up
-- KEYS[11] inflight       zset: batch id -> deadline (ms)
-- KEYS[12] inflight_calls hash: batch id -> calls in the batch
-- KEYS[13] inflight_items hash: batch id -> cjson list of entries (at-least-once pools)
-- KEYS[14] dead           list: dead letters, "json NL payload"
-- KEYS[15] done           zset: entry id -> end of its processed-guard window (ms)
-- Common ARGV: [1] capacity, [2] policy (sample|newest|reject), [3] coalesce (1|0),
-- [4] drain lease ms (see plan_drain in common.lua).
local K_ITEMS, K_COUNTS, K_STATS, K_DRAINS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_RECEIVES, K_AGES, K_SCHEDULED, K_DEDUPE, K_FLOW, K_WAKE = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local K_INFLIGHT, K_INFLIGHT_CALLS, K_INFLIGHT_ITEMS = KEYS[11], KEYS[12], KEYS[13]
local K_DEAD, K_DONE = KEYS[14], KEYS[15]
local CAPACITY, POLICY, COALESCE, DRAIN_TTL = tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1', ARGV[4]

--#include common

-- Pools count whole milliseconds (deadlines and wake-ups feed PX, which takes integers).
local function pool_now()
  return math.floor(now_ms())
end

-- Per-second flow counters of this pool.
local function pool_tick(kind, n, now)
  tick(K_FLOW, kind, n, now)
end

-- The id and payload of a member: coalescing members are their payload, others carry a unique
-- hex prefix. Nil when the member is malformed (only corruption makes one).
local function parse_member(member)
  if COALESCE then return member, member end
  return string.match(member, '^(%x+):(.*)$')
end

local function payload_of(member)
  local _, payload = parse_member(member)
  return payload or member
end

-- Calls an entry stands for; a corrupted count counts as one call.
local function count_of(member)
  if COALESCE then return tonumber(redis.call('HGET', K_COUNTS, member) or '1') or 1 end
  return 1
end

-- Remove an entry with everything kept about it; returns how many calls it stood for.
local function remove(member)
  local n = count_of(member)
  redis.call('ZREM', K_ITEMS, member)
  redis.call('ZREM', K_AGES, member)
  redis.call('HDEL', K_RECEIVES, member)
  if COALESCE then redis.call('HDEL', K_COUNTS, member) end
  return n
end

-- Let an entry in (new, returned by the reaper, requeued or due): it takes a free place, or
-- the policy decides. Returns status (0 refused, 1 kept, 2 kept and an older entry evicted,
-- 3 merged) and the calls evicted to make room.
local function admit(member, score, count, receives, offered_at)
  if COALESCE and redis.call('ZSCORE', K_ITEMS, member) then
    redis.call('HINCRBY', K_COUNTS, member, count)
    -- A returned entry merging into an equal one keeps its receives, or a failing payload
    -- that keeps being offered would never reach the dead-letter list.
    if receives > tonumber(redis.call('HGET', K_RECEIVES, member) or '0') then
      redis.call('HSET', K_RECEIVES, member, receives)
    end
    return 3, 0
  end
  local size = redis.call('ZCARD', K_ITEMS)
  local status, evicted = 1, 0
  if size >= CAPACITY then
    if POLICY == 'newest' then
      evicted = remove(redis.call('ZRANGE', K_ITEMS, 0, 0)[1])
      status = 2
    elseif POLICY == 'sample' then
      -- Bottom-k sample: keep the CAPACITY lowest random scores seen since the last drain.
      local top = redis.call('ZRANGE', K_ITEMS, -1, -1, 'WITHSCORES')
      if score < tonumber(top[2]) then
        evicted = remove(top[1])
        status = 2
      else
        status = 0
      end
    else
      status = 0
    end
  end
  if status > 0 then
    redis.call('ZADD', K_ITEMS, score, member)
    redis.call('ZADD', K_AGES, offered_at, member)
    if COALESCE then redis.call('HSET', K_COUNTS, member, count) end
    if receives > 0 then redis.call('HSET', K_RECEIVES, member, receives) end
  end
  return status, evicted
end

-- When the pool next has work: now if entries wait, else when the first delayed call is due
-- (nil: nothing at all). Then plan the drain job that work needs (common.lua's plan_drain).
local function plan_pool_drain(now)
  local next_at = nil
  if redis.call('ZCARD', K_ITEMS) > 0 then
    next_at = now
  else
    local first = redis.call('ZRANGE', K_SCHEDULED, 0, 0, 'WITHSCORES')
    if #first > 0 then next_at = tonumber(first[2]) end
  end
  return plan_drain(K_DRAINS, K_WAKE, DRAIN_TTL, now, next_at)
end

-- Append a dead letter: metadata as JSON, then the payload after a newline.
local function bury(payload, count, receives, err, now)
  local info = cjson.encode({count = count, receives = receives, error = err, at = now})
  redis.call('RPUSH', K_DEAD, info .. '\n' .. payload)
  redis.call('HINCRBY', K_STATS, 'dead', count)
end
