-- Count in-flight batches whose deadline passed as lost (their drain died: at-most-once).
-- KEYS[1] stats           hash: counters
-- KEYS[2] inflight        zset: batch id -> deadline
-- KEYS[3] inflight_calls  hash: batch id -> number of calls
-- ARGV[1] most batches to reap in this call
-- Returns the number of calls counted as lost. Bounded: O(limit * log N).
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[1]))
local lost = 0
for _, batch in ipairs(expired) do
  lost = lost + tonumber(redis.call('HGET', KEYS[3], batch) or '0')
  redis.call('HDEL', KEYS[3], batch)
  redis.call('ZREM', KEYS[2], batch)
end
if lost > 0 then
  redis.call('HINCRBY', KEYS[1], 'in_flight', -lost)
  redis.call('HINCRBY', KEYS[1], 'lost', lost)
end
return lost
