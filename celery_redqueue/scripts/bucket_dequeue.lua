-- Release the head item of the key that has been eligible longest, and reserve it.
-- KEYS: as in bucket_enqueue.lua (ready, tat, rates, items, heads, tails, inflight, res_keys,
-- res_items, stats, keystats, dead, drains, wake).
-- ARGV[1] default interval ms, ARGV[2] default burst, ARGV[3] ordered (1|0)
-- ARGV[4] reservation timeout ms, ARGV[5] drain flag time-to-live ms
-- ARGV[6] most drain jobs at once (fan-out limit)
-- Returns one of:
--   {0}                       nothing queued at all (the drain flag was cleared in this step)
--   {1, wait_ms}              items queued, but no key is eligible for wait_ms more
--   {2, key, reservation id, payload, receives, deadline ms, now ms, fan_out}
-- Times go back as "%.17g" strings: tostring() keeps 14 digits, which rounds ms timestamps
-- to 0.1 ms and would let a fast key with a burst drift above its rate. Bounded: O(log K).
local ready, tat, rates, items, heads, tails = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local inflight, res_keys, res_items = KEYS[7], KEYS[8], KEYS[9]
local stats, keystats, drains, wake = KEYS[10], KEYS[11], KEYS[13], KEYS[14]
local ordered = ARGV[3] == '1'

--#include bucket_common
local now = now_ms()

local top = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
if #top == 0 then
  -- Nothing is eligible, ever, until a new item, a commit (ordered keys) or the reaper adds a
  -- key; the drain flag is cleared in this same step so that the next enqueue sends a job.
  redis.call('DEL', drains, wake)
  return {0}
end
local key, when = top[1], tonumber(top[2])
if when > now then
  local wait = when - now
  redis.call('SET', wake, string.format('%.17g', when), 'PX', math.ceil(wait) + tonumber(ARGV[5]))
  redis.call('SET', drains, redis.call('GET', drains) or '1', 'PX', math.ceil(wait) + tonumber(ARGV[5]))
  return {1, string.format('%.17g', wait)}
end

local head = tonumber(redis.call('HGET', heads, key) or '0')
local tail = tonumber(redis.call('HGET', tails, key) or '0')
local field = key .. '\0' .. head
local slot = redis.call('HGET', items, field)
redis.call('HDEL', items, field)
if head + 1 >= tail then
  redis.call('HDEL', heads, key)
  redis.call('HDEL', tails, key)
else
  redis.call('HSET', heads, key, head + 1)
end

local receives, id, payload = string.match(slot, '^(%d+):(%d+):(.*)$')
receives = tonumber(receives) + 1

local interval, burst = rate_of(key)
-- GCRA: the schedule advances from the key's own theoretical arrival time, so a consumer that is
-- late by less than the burst allowance loses no throughput, and none can exceed the rate.
local next_tat = math.max(tonumber(redis.call('HGET', tat, key) or '0'), now) + interval
redis.call('HSET', tat, key, string.format('%.17g', next_tat))
if head + 1 < tail and not ordered then
  redis.call('ZADD', ready, next_tat - burst * interval, key)
else
  redis.call('ZREM', ready, key)
end

local reservation = id .. '.' .. receives
local deadline = now + tonumber(ARGV[4])
redis.call('ZADD', inflight, deadline, reservation)
redis.call('HSET', res_keys, reservation, key)
redis.call('HSET', res_items, reservation, receives .. ':' .. id .. ':' .. payload)
redis.call('HINCRBY', stats, 'depth', -1)
redis.call('HINCRBY', stats, 'in_flight', 1)
redis.call('HINCRBY', stats, 'receives', 1)
redis.call('HINCRBY', keystats, key .. '\0in_flight', 1)
redis.call('DEL', wake)

-- Fan out while more keys are eligible than drain jobs are running.
local fan_out = 0
local running = tonumber(redis.call('GET', drains) or '0')
if running == 0 then
  running = 1
  redis.call('SET', drains, 1, 'PX', ARGV[5])
else
  redis.call('PEXPIRE', drains, ARGV[5])
end
if running < tonumber(ARGV[6]) and redis.call('ZCOUNT', ready, '-inf', now) > running then
  redis.call('INCR', drains)
  fan_out = 1
end
return {2, key, reservation, payload, receives, string.format('%.17g', deadline), string.format('%.17g', now), fan_out}
