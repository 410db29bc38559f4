-- Finish an in-flight batch: count what succeeded; retry (at least once) or count what failed;
-- dead-letter at once what can never succeed (a payload the worker could not decode).
-- KEYS[1..20]: the pool's keys (pool_common.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] batch id, ARGV[6] at least once (1|0), ARGV[7] max receives,
-- ARGV[8] processed-guard window ms (0: off), ARGV[9] seconds the bodies took,
-- ARGV[10] calls the batch holds (as the caller counts them: checked against the pool's count),
-- ARGV[11] f, then f groups of 4, one per entry that did not succeed (the others did): id, calls
-- it stands for, error text, '' or '!' followed by the raw payload to dead-letter now with that
-- error; then, with the processed guard on, the ids of the entries that succeeded.
-- Reply: {held, send_drain}. held 0: the batch was no longer in flight (the reaper had taken it
-- back: counted as `late`); 2: this ack was applied already (a re-send); send_drain 1: retried
-- calls need a drain job the caller should send.
-- Lost reply: safe to run twice: the ack is recorded (call_records.lua) under its batch id, and
-- a second run replies "already done" (held 2) and changes nothing.
--#include pool_common
--#include pool_batch
local batch_id, at_least_once = ARGV[5], ARGV[6] == '1'
local max_receives, processed_guard_ms, busy = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local named, groups = tonumber(ARGV[10]), tonumber(ARGV[11])
local now = pool_now()

-- Check every argument before writing anything.
if not (named and groups) or #ARGV < 11 + 4 * groups then
  return redis.error_reply('ERR pool_ack: bad call or failure count')
end
local last = 11 + 4 * groups
local unsettled = 0
for i = 12, last, 4 do
  local count = tonumber(ARGV[i + 1])
  if not count or ARGV[i + 2] == '' then
    return redis.error_reply('ERR pool_ack: bad failure ' .. ARGV[i] .. ' ' .. tostring(ARGV[i + 1]))
  end
  unsettled = unsettled + count
end
-- Ids that succeeded are recorded by the guard either way (a late ack too), so their returned
-- copies are skipped.
if processed_guard_ms > 0 and #ARGV > last then
  forget_expired(K_DONE, now)
  for i = last + 1, #ARGV do redis.call('ZADD', K_DONE, now + processed_guard_ms, ARGV[i]) end
end
local calls = tonumber(redis.call('HGET', K_INFLIGHT_CALLS, batch_id) or '-1') or -1
if calls < 0 then
  -- A late ack is recorded too, so that its re-send is not counted late twice.
  local done = recorded(K_CALLS, 'ack:' .. batch_id)
  if done == 'late' then return {0, 0} end
  if done then return {2, 0} end
  if named > 0 then redis.call('HINCRBY', K_STATS, 'late', named) end
  record_call(K_CALLS, K_CALLS_AT, 'ack:' .. batch_id, 'late', now)
  return {0, 0}
end
if named ~= calls or unsettled > calls then
  return redis.error_reply('ERR pool_ack: batch holds ' .. calls .. ' calls, the ack names ' .. named)
end
-- The batch's entries by id, read only when needed: at least once, a failed entry goes back
-- with what was kept about it. A record that cannot be decoded leaves its failed calls counted
-- as failed.
local entries = {}
if at_least_once and unsettled > 0 then
  for _, entry in ipairs(unpack_batch(redis.call('HGET', K_INFLIGHT_ITEMS, batch_id) or '') or {}) do
    entries[entry[6]] = entry
  end
end
redis.call('HDEL', K_INFLIGHT_CALLS, batch_id)
redis.call('HDEL', K_INFLIGHT_ITEMS, batch_id)
redis.call('ZREM', K_INFLIGHT, batch_id)
record_call(K_CALLS, K_CALLS_AT, 'ack:' .. batch_id, 1, now)

local failed, retried, buried, evicted = 0, 0, 0, 0
for i = 12, last, 4 do
  local id, count, err, bad = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local entry = entries[id]
  if bad ~= '' then
    bury(string.sub(bad, 2), count, entry and entry[4] or 1, err, now)
    buried = buried + count
  elseif at_least_once and entry and entry[4] >= max_receives then
    bury(payload_of(entry[1]), count, entry[4], err, now)
    buried = buried + count
  elseif at_least_once and entry then
    local status, out = admit(entry[1], entry[2], count, entry[4], entry[5])
    evicted = evicted + out
    -- What admit pushed out was waiting in the pool: it leaves the depth too.
    if out > 0 then redis.call('HINCRBY', K_STATS, 'depth', -out) end
    if status > 0 then retried = retried + count else evicted = evicted + count end
  else
    failed = failed + count
  end
end
local processed = calls - unsettled
add_counts(K_STATS, {in_flight = -calls, processed = processed, failed = failed,
                     retried = retried, depth = retried, evicted = evicted})
pool_tick('out', processed + failed + buried, now)
pool_tick('busy', busy, now)
pool_tick('done', processed + failed + buried, now)
if retried > 0 and plan_pool_drain(now) == 1 then return {1, 1} end
return {1, 0}
