-- Finish an in-flight batch: count its calls as processed or failed.
-- KEYS[1] stats           hash: counters
-- KEYS[2] inflight        zset: batch id -> deadline
-- KEYS[3] inflight_calls  hash: batch id -> number of calls
-- ARGV[1] batch id
-- ARGV[2] calls processed
-- ARGV[3] calls failed
-- Returns 1, or 0 when the batch was no longer in flight (the reaper had already counted it).
local calls = redis.call('HGET', KEYS[3], ARGV[1])
if not calls then
  return 0
end
local processed, failed = tonumber(ARGV[2]), tonumber(ARGV[3])
if processed + failed ~= tonumber(calls) then
  return redis.error_reply('ERR batch holds ' .. calls .. ' calls, ack names ' .. (processed + failed))
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'in_flight', -processed - failed)
if processed > 0 then redis.call('HINCRBY', KEYS[1], 'processed', processed) end
if failed > 0 then redis.call('HINCRBY', KEYS[1], 'failed', failed) end
return 1
