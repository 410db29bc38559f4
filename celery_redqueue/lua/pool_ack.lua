-- Finish an in-flight batch: count what succeeded; retry (at least once) or count what failed;
-- dead-letter at once what can never succeed (a payload the worker could not decode).
-- KEYS[1..19]: the pool's keys (pool_common.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] batch id, ARGV[6] at least once (1|0), ARGV[7] max receives,
-- ARGV[8] processed-guard window ms (0: off), ARGV[9] seconds the bodies took,
-- ARGV[10], ... groups of 4 per delivered entry: id, calls it stands for, error text ('' = ok),
-- '' or '!' followed by the raw payload to dead-letter now with that error.
-- Reply: {held, send_drain}. held 0: the batch was no longer in flight (the reaper had taken it
-- back: counted as `late`); 2: this ack was applied already (a re-send); send_drain 1: retried
-- calls need a drain job the caller should send.
-- Ids that succeeded are recorded by the guard either way, so their returned copies are skipped.
-- Lost reply: safe to run twice: the ack is recorded (call_records.lua) under its batch id, and
-- a second run replies "already done" (held 2) and changes nothing.
--#include pool_common
local batch_id, at_least_once = ARGV[5], ARGV[6] == '1'
local max_receives, processed_guard_ms, busy = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local now = pool_now()

-- Check every argument before writing anything.
local named = 0
for i = 10, #ARGV, 4 do
  local count = tonumber(ARGV[i + 1])
  if not count then return redis.error_reply('ERR pool_ack: bad count ' .. ARGV[i + 1]) end
  named = named + count
end
if processed_guard_ms > 0 then
  forget_expired(K_DONE, now)
  for i = 10, #ARGV, 4 do
    if ARGV[i + 2] == '' then redis.call('ZADD', K_DONE, now + processed_guard_ms, ARGV[i]) end
  end
end
local calls = tonumber(redis.call('HGET', K_INFLIGHT_CALLS, batch_id) or '-1') or -1
if calls < 0 then
  if recorded(K_CALLS, 'ack:' .. batch_id) then return {2, 0} end
  if named > 0 then redis.call('HINCRBY', K_STATS, 'late', named) end
  return {0, 0}
end
if named ~= calls then
  return redis.error_reply('ERR pool_ack: batch holds ' .. calls .. ' calls, the ack names ' .. named)
end
-- At least once, the popped entries are kept by id: the caller's list need not be in pop order.
-- A batch record that cannot be decoded leaves its failed calls counted as failed.
local entries = {}
if at_least_once then
  local ok, kept = pcall(cjson.decode, redis.call('HGET', K_INFLIGHT_ITEMS, batch_id) or '[]')
  if ok and type(kept) == 'table' then
    for _, entry in ipairs(kept) do entries[tostring(entry[6])] = entry end
  end
end
redis.call('HDEL', K_INFLIGHT_CALLS, batch_id)
redis.call('HDEL', K_INFLIGHT_ITEMS, batch_id)
redis.call('ZREM', K_INFLIGHT, batch_id)
record_call(K_CALLS, K_CALLS_AT, 'ack:' .. batch_id, 1, now)

local processed, failed, retried, buried, evicted = 0, 0, 0, 0, 0
for i = 10, #ARGV, 4 do
  local id, count, err, bad = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local entry = entries[id]
  if err == '' then
    processed = processed + count
  elseif bad ~= '' then
    bury(string.sub(bad, 2), count, entry and tonumber(entry[4]) or 1, err, now)
    buried = buried + count
  elseif at_least_once and entry and tonumber(entry[4]) >= max_receives then
    bury(payload_of(entry[1]), count, tonumber(entry[4]), err, now)
    buried = buried + count
  elseif at_least_once and entry then
    local status, out = admit(entry[1], tonumber(entry[2]), count, tonumber(entry[4]), tonumber(entry[5]))
    evicted = evicted + out
    -- What admit pushed out was waiting in the pool: it leaves the depth too.
    if out > 0 then redis.call('HINCRBY', K_STATS, 'depth', -out) end
    if status > 0 then retried = retried + count else evicted = evicted + count end
  else
    failed = failed + count
  end
end
add_counts(K_STATS, {in_flight = -calls, processed = processed, failed = failed,
                     retried = retried, depth = retried, evicted = evicted})
pool_tick('out', processed + failed + buried, now)
pool_tick('busy', busy, now)
pool_tick('done', processed + failed + buried, now)
if retried > 0 and plan_pool_drain(now) == 1 then return {1, 1} end
return {1, 0}
