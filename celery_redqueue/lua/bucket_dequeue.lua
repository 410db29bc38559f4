-- Release the head item of the key that has been eligible longest, and reserve it.
-- KEYS and ARGV[1..7]: see bucket_common.lua.
-- ARGV[8] reservation timeout ms, ARGV[9] most drain jobs at once (fan-out limit),
-- ARGV[10] processed-guard (1|0): skip items whose id completed already.
-- Returns one of:
--   {0}                       nothing queued or due (the drain flag was cleared in this step)
--   {1, wait_ms}              items queued or delayed, but none may go for wait_ms more
--   {2, key, reservation id, payload, receives, deadline ms, now ms, fan_out}
-- Times go back as "%.17g" strings: tostring() keeps 14 digits, which rounds ms timestamps
-- to 0.1 ms and would let a fast key with a burst drift above its rate. Bounded: O(log K)
-- (plus at most 100 due delayed items moved in, and at most 100 guard-skipped items).
--#include bucket_common
local guard = ARGV[10] == '1'
local now = now_ms()

-- Due delayed items join the tail of their key's queue, in due order.
local due = redis.call('ZRANGEBYSCORE', K_SCHEDULED, '-inf', now, 'LIMIT', 0, 100)
for _, entry in ipairs(due) do
  redis.call('ZREM', K_SCHEDULED, entry)
  local id, key, payload = string.match(entry, '^(%d+) ([^%z]*)%z(.*)$')
  local status = append(key, make_slot(0, id, now, payload), now)
  if status == 0 then redis.call('HINCRBY', K_STATS, 'rejected', 1) else redis.call('HINCRBY', K_STATS, 'enqueued', 1) end
end
if #due > 0 then redis.call('HINCRBY', K_STATS, 'delayed', -#due) end

local function sleep_until(when)
  redis.call('SET', K_WAKE, string.format('%.17g', when), 'PX', math.ceil(when - now) + DRAIN_TTL)
  redis.call('SET', K_DRAINS, redis.call('GET', K_DRAINS) or '1', 'PX', math.ceil(when - now) + DRAIN_TTL)
  return {1, string.format('%.17g', when - now)}
end

for _ = 1, 100 do
  local top = redis.call('ZRANGE', K_READY, 0, 0, 'WITHSCORES')
  local first_due = redis.call('ZRANGE', K_SCHEDULED, 0, 0, 'WITHSCORES')
  if #top == 0 then
    if #first_due > 0 then return sleep_until(tonumber(first_due[2])) end
    -- Nothing is eligible until a new item, a commit (ordered keys) or the reaper adds a key;
    -- the drain flag is cleared in this same step so that the next enqueue sends a job.
    redis.call('DEL', K_DRAINS, K_WAKE)
    return {0}
  end
  local key, when = top[1], tonumber(top[2])
  if when > now then
    if #first_due > 0 and tonumber(first_due[2]) < when then when = tonumber(first_due[2]) end
    return sleep_until(when)
  end

  local head = tonumber(redis.call('HGET', K_HEADS, key) or '0')
  local field = key .. '\0' .. head
  local slot = redis.call('HGET', K_ITEMS, field)
  redis.call('HDEL', K_ITEMS, field)
  redis.call('HINCRBY', K_STATS, 'depth', -1)
  local remaining = key_depth(key) - 1
  if remaining <= 0 then
    redis.call('HDEL', K_HEADS, key)
    redis.call('HDEL', K_TAILS, key)
  else
    redis.call('HSET', K_HEADS, key, head + 1)
  end
  refresh_age(key)
  local receives, id, at, payload = parse_slot(slot)

  if guard and redis.call('ZSCORE', K_DONE, id) then
    -- A redelivered item whose body already completed: not applied twice, and it does not
    -- use up its key's rate.
    redis.call('HINCRBY', K_STATS, 'processed', 1)
    redis.call('HINCRBY', K_STATS, 'guard_skipped', 1)
    redis.call('HINCRBY', K_KEYSTATS, key .. '\0processed', 1)
    if remaining <= 0 then redis.call('ZREM', K_READY, key) end
  else
    receives = receives + 1
    local interval, burst = rate_of(key)
    -- GCRA: the schedule advances from the key's own theoretical arrival time, so a consumer
    -- late by less than the burst allowance loses no throughput, and none can exceed the rate.
    local next_tat = math.max(tonumber(redis.call('HGET', K_TAT, key) or '0'), now) + interval
    redis.call('HSET', K_TAT, key, string.format('%.17g', next_tat))
    if remaining > 0 and not ORDERED then
      redis.call('ZADD', K_READY, next_tat - burst * interval, key)
    else
      redis.call('ZREM', K_READY, key)
    end

    local reservation = id .. '.' .. receives
    local deadline = now + tonumber(ARGV[8])
    redis.call('ZADD', K_INFLIGHT, deadline, reservation)
    redis.call('HSET', K_RES_KEYS, reservation, key)
    redis.call('HSET', K_RES_ITEMS, reservation, make_slot(receives, id, at, payload))
    redis.call('HINCRBY', K_STATS, 'in_flight', 1)
    redis.call('HINCRBY', K_STATS, 'receives', 1)
    if receives > 1 then redis.call('HINCRBY', K_STATS, 'redelivered', 1) end
    redis.call('HINCRBY', K_KEYSTATS, key .. '\0in_flight', 1)
    redis.call('DEL', K_WAKE)

    -- One drain job per key eligible now, up to the fan-out limit.
    local eligible = redis.call('ZCOUNT', K_READY, '-inf', now)
    local fan_out = claim_drain(K_DRAINS, DRAIN_TTL, tonumber(ARGV[9]), eligible)
    return {2, key, reservation, payload, receives, string.format('%.17g', deadline),
            string.format('%.17g', now), fan_out}
  end
end
return {1, '0'}
