-- Pop up to n entries, record them as one in-flight batch, and manage the drains flag.
-- KEYS[1] items           zset: member -> score
-- KEYS[2] counts          hash: member -> merged calls (coalescing pools only)
-- KEYS[3] stats           hash: counters
-- KEYS[4] drains          string: number of drain jobs pending
-- KEYS[5] inflight        zset: batch id -> deadline (ms, server clock)
-- KEYS[6] inflight_calls  hash: batch id -> number of calls in the batch
-- ARGV[1] n, the batch size
-- ARGV[2] batch id (unique, chosen by the caller)
-- ARGV[3] how long the batch may stay in flight, ms
-- ARGV[4] time-to-live of the drains flag, ms
-- ARGV[5] most drain jobs that may run at once (fan-out limit)
-- ARGV[6] coalesce: 1 | 0
-- Returns {fan_out, remaining, payload1, count1, payload2, count2, ...}.
-- An empty pop means the pool was empty at that instant, and the drains flag was cleared in
-- the same step, so a call added right after it sees no flag and sends a fresh drain job.
local items, counts, stats, drains = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local inflight, inflight_calls = KEYS[5], KEYS[6]
local n = tonumber(ARGV[1])
local coalesce = ARGV[6] == '1'

local popped = redis.call('ZPOPMIN', items, n)
if #popped == 0 then
  redis.call('DEL', drains)
  return {0, 0}
end

local result = {0, 0}
local calls = 0
for i = 1, #popped, 2 do
  local member = popped[i]
  local count = 1
  local payload = member
  if coalesce then
    count = tonumber(redis.call('HGET', counts, member) or '1')
    redis.call('HDEL', counts, member)
  else
    payload = string.sub(member, string.find(member, ':', 1, true) + 1)
  end
  calls = calls + count
  result[#result + 1] = payload
  result[#result + 1] = count
end

local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', inflight, now_ms + tonumber(ARGV[3]), ARGV[2])
redis.call('HSET', inflight_calls, ARGV[2], calls)
redis.call('HINCRBY', stats, 'queued', -calls)
redis.call('HINCRBY', stats, 'in_flight', calls)

-- A drain that runs without a pending flag (started by beat) claims it, so producers do not
-- send another job while it works.
local running = tonumber(redis.call('GET', drains) or '0')
if running == 0 then
  running = 1
  redis.call('SET', drains, 1, 'PX', ARGV[4])
else
  redis.call('PEXPIRE', drains, ARGV[4])
end

local remaining = redis.call('ZCARD', items)
result[2] = remaining
-- Fan out while there is more than one batch left for every running drain.
if running < tonumber(ARGV[5]) and remaining > n * running then
  redis.call('INCR', drains)
  result[1] = 1
end
return result
