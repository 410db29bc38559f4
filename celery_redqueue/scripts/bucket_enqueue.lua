-- Append items to their keys' FIFO queues, make those keys eligible, arm the drain flag.
-- Every bucket script receives the same KEYS (see LeakyBucket.PARTS in bucket.py):
-- KEYS[1] ready      zset: key -> time (ms) since which the key may release its head item
-- KEYS[2] tat        hash: key -> theoretical arrival time (ms) of its next item (GCRA)
-- KEYS[3] rates      hash: key -> "interval_ms burst" (absent: the default rate)
-- KEYS[4] items      hash: key NUL position -> "receives:id:payload"
-- KEYS[5] heads      hash: key -> position of its head item
-- KEYS[6] tails      hash: key -> position after its last item
-- KEYS[7] inflight   zset: reservation id -> deadline (ms)
-- KEYS[8] res_keys   hash: reservation id -> key
-- KEYS[9] res_items  hash: reservation id -> "receives:id:payload"
-- KEYS[10] stats     hash: counters (seq, enqueued, rejected, dropped, processed, dead, ...)
-- KEYS[11] keystats  hash: key NUL counter -> n (in_flight, processed, dead per key)
-- KEYS[12] dead      list: dead letters, "json NL payload"
-- KEYS[13] drains    string: number of drain jobs pending; absent when none is
-- KEYS[14] wake      string: when (ms) the sleeping drain job will wake up
-- ARGV[1] default interval ms, ARGV[2] default burst, ARGV[3] ordered (1|0)
-- ARGV[4] max depth per key (0: unbounded), ARGV[5] overflow: reject | drop_oldest
-- ARGV[6] drain flag time-to-live ms
-- ARGV[7], ARGV[8], ... pairs of (key, payload)
-- Returns {send_drain, status...}: 1 queued, 0 refused (key full), 2 queued and the key's
-- oldest item dropped. Bounded: O(batch * log K).
local ready, tat, rates, items, heads, tails = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local stats, keystats, drains, wake = KEYS[10], KEYS[11], KEYS[13], KEYS[14]
local ordered = ARGV[3] == '1'
local max_depth = tonumber(ARGV[4])

--#include bucket_common
local now = now_ms()

local result = {0}
local earliest = nil
local queued, rejected, dropped = 0, 0, 0
for i = 7, #ARGV, 2 do
  local key, payload = ARGV[i], ARGV[i + 1]
  local head = tonumber(redis.call('HGET', heads, key) or '0')
  local tail = tonumber(redis.call('HGET', tails, key) or '0')
  local status = 1
  if max_depth > 0 and tail - head >= max_depth then
    if ARGV[5] == 'drop_oldest' then
      redis.call('HDEL', items, key .. '\0' .. head)
      head = redis.call('HINCRBY', heads, key, 1)
      dropped = dropped + 1
      status = 2
    else
      status = 0
      rejected = rejected + 1
    end
  end
  if status > 0 then
    local id = redis.call('HINCRBY', stats, 'seq', 1)
    redis.call('HSET', items, key .. '\0' .. tail, '0:' .. id .. ':' .. payload)
    redis.call('HINCRBY', tails, key, 1)
    queued = queued + 1
    local busy = ordered and tonumber(redis.call('HGET', keystats, key .. '\0in_flight') or '0') > 0
    if not busy and not redis.call('ZSCORE', ready, key) then
      local when = eligible_at(key, now)
      redis.call('ZADD', ready, when, key)
      if earliest == nil or when < earliest then earliest = when end
    end
  end
  result[#result + 1] = status
end

redis.call('HINCRBY', stats, 'enqueued', queued)
if rejected > 0 then redis.call('HINCRBY', stats, 'rejected', rejected) end
if dropped > 0 then redis.call('HINCRBY', stats, 'dropped', dropped) end
redis.call('HINCRBY', stats, 'depth', queued - dropped)

if queued > 0 then
  if redis.call('SET', drains, 1, 'NX', 'PX', ARGV[6]) then
    result[1] = 1
  elseif earliest ~= nil then
    -- A drain job sleeps until `wake`; a key that becomes eligible earlier needs its own job.
    local sleeping_until = tonumber(redis.call('GET', wake) or '-1')
    if sleeping_until > earliest then
      redis.call('DEL', wake)
      result[1] = 1
    end
  end
end
return result
