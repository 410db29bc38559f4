-- Finish an in-flight batch: count what succeeded; retry (at least once) or count what failed.
-- KEYS: see pool_common.lua. ARGV[1..4]: common (capacity, policy, coalesce, drain ttl).
-- ARGV[5] batch id, ARGV[6] at least once (1|0), ARGV[7] max receives,
-- ARGV[8] processed-guard window ms (0: off), ARGV[9] seconds the bodies took,
-- ARGV[10], ARGV[11], ARGV[12], ... triples per delivered entry, in batch order: id, calls it
-- stands for, error text ('' = ok).
-- Returns 1, or 0 when the batch was no longer in flight (the reaper had taken it back); ids
-- that succeeded are recorded by the guard either way, so their returned copies are skipped.
--#include pool_common
local batch_id, at_least_once = ARGV[5], ARGV[6] == '1'
local max_receives, guard_window = tonumber(ARGV[7]), tonumber(ARGV[8])
local now = pool_now()

if guard_window > 0 then
  forget_expired(K_DONE, now)
  for i = 10, #ARGV, 3 do
    if ARGV[i + 2] == '' then redis.call('ZADD', K_DONE, now + guard_window, ARGV[i]) end
  end
end

local calls = redis.call('HGET', K_INFLIGHT_CALLS, batch_id)
if not calls then
  return 0
end
local total, named = tonumber(calls), 0
for i = 11, #ARGV, 3 do named = named + tonumber(ARGV[i]) end
if named ~= total then
  return redis.error_reply('ERR batch holds ' .. total .. ' calls, the ack names ' .. named)
end
-- At least once, the popped entries are kept by id: the caller's list need not be in pop order.
local entries = {}
if at_least_once then
  for _, entry in ipairs(cjson.decode(redis.call('HGET', K_INFLIGHT_ITEMS, batch_id) or '[]')) do
    entries[entry[6]] = entry
  end
end
redis.call('HDEL', K_INFLIGHT_CALLS, batch_id)
redis.call('HDEL', K_INFLIGHT_ITEMS, batch_id)
redis.call('ZREM', K_INFLIGHT, batch_id)

local processed, failed, retried, buried, evicted = 0, 0, 0, 0, 0
local counted = 0
for i = 10, #ARGV, 3 do
  local count, err = tonumber(ARGV[i + 1]), ARGV[i + 2]
  local entry = entries[ARGV[i]]
  counted = counted + count
  if err == '' then
    processed = processed + count
  elseif at_least_once and entry then
    local member, score = entry[1], tonumber(entry[2])
    local receives, offered_at = tonumber(entry[4]), tonumber(entry[5])
    if receives >= max_receives then
      bury(payload_of(member), count, receives, err, now)
      buried = buried + count
    else
      local status, out = admit(member, score, count, receives, offered_at)
      evicted = evicted + out
      -- What admit pushed out was waiting in the pool: it leaves the depth too.
      if out > 0 then redis.call('HINCRBY', K_STATS, 'queued', -out) end
      if status > 0 then retried = retried + count else evicted = evicted + count end
    end
  else
    failed = failed + count
  end
end
redis.call('HINCRBY', K_STATS, 'in_flight', -total)
if processed > 0 then redis.call('HINCRBY', K_STATS, 'processed', processed) end
if failed > 0 then redis.call('HINCRBY', K_STATS, 'failed', failed) end
if retried > 0 then
  redis.call('HINCRBY', K_STATS, 'retried', retried)
  redis.call('HINCRBY', K_STATS, 'queued', retried)
end
if evicted > 0 then redis.call('HINCRBY', K_STATS, 'evicted', evicted) end
pool_tick('out', processed + failed + buried, now)
pool_tick('busy', tonumber(ARGV[9]), now)
pool_tick('done', processed + failed + buried, now)
if retried > 0 and arm_drain() then return 2 end
return 1
