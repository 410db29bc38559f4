-- Finish an in-flight batch: count what succeeded; retry (now, or as a delayed call after a
-- retry delay, in either delivery mode), count what failed, or dead-letter it (at once what can
-- never succeed: a payload the worker could not decode).
-- KEYS[1..21]: the pool's keys (pool_keys.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] batch id, ARGV[6] at least once (1|0: unused here, the marks say), ARGV[7] max receives,
-- ARGV[8] processed-guard window ms (0: off), ARGV[9] seconds the bodies took,
-- ARGV[10] calls the batch holds (as the caller counts them: checked against the pool's count),
-- ARGV[11] f, then f groups of 4, one per entry that did not succeed (the others did): id, calls
-- it stands for, error text, and a mark: '' failed, '@' and ms: retried after that delay (0:
-- back in the pool now; past max receives: dead instead), 'd': dead now, '!' and the raw
-- payload: dead now (undecodable). A delayed retry waits in
-- `scheduled` as "<id>/<receives>/<count>:<score>:<payload>" (pool_due.lua), counted in depth.
-- Then, with the processed guard on, the ids of the entries that succeeded.
-- Calls retried now (mark '@0') are not put back here: the batch stays in flight holding only
-- them (its record rewritten, in_flight counting them), and `back` asks the caller to run
-- pool_ack_back, which puts them back in the pool (a drain that dies between the two steps
-- leaves them to the reaper, as any batch in flight).
-- Checks every key it writes and the stats counters before its first write (a bad one:
-- CORRUPT, nothing written).
-- Reply: {held, send_drain, back}. held LATE (0): the batch was no longer in flight (the reaper
-- had taken it back: counted as `late`); HELD (1): acked now; DONE (2): this ack was applied
-- already (a re-send); send_drain 1: retried calls need a drain job the caller should send;
-- back 1: calls retried now wait in the batch: run pool_ack_back.
-- Lost reply: safe to run twice: the ack is recorded (record_call.lua) under its batch id, and
-- a second run replies "already done" (DONE) and changes nothing (back 1 again while the
-- batch still holds calls retried now).
--#include clock
--#include tick
--#include add_counts
--#include forget_expired
--#include record_call
--#include recorded
--#include pool_keys
--#include pool_unpack_batch
--#include pool_bury
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local LATE, HELD, DONE = 0, 1, 2
local batch_id, max_receives, processed_guard_ms = ARGV[5], tonumber(ARGV[7]), tonumber(ARGV[8])
local named, groups, busy = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[9])
local now = math.floor(now_ms())

-- Check every argument before writing anything.
if not (named and groups) or #ARGV < 11 + 4 * groups then
  return redis.error_reply('ERR pool_ack: bad call or failure count')
end
local last = 11 + 4 * groups
local unsettled = 0
for i = 12, last, 4 do
  local count, mark, delay = tonumber(ARGV[i + 1]), ARGV[i + 3], string.match(ARGV[i + 3], '^@(%d+)$')
  if not count or ARGV[i + 2] == '' or not (delay or mark == '' or mark == 'd' or string.sub(mark, 1, 1) == '!') then
    return redis.error_reply('ERR pool_ack: bad failure ' .. ARGV[i] .. ' ' .. tostring(ARGV[i + 1]))
  end
  unsettled = unsettled + count
end
check_keys({pool.inflight, 'zset', pool.inflight_calls, 'hash', pool.inflight_items, 'hash',
  pool.scheduled, 'zset', pool.dead, 'list', pool.done, 'zset', pool.calls, 'hash',
  pool.calls_at, 'zset', pool.drains, 'string'}, pool.stats)
local calls = tonumber(redis.call('HGET', pool.inflight_calls, batch_id) or '-1') or -1
-- A late ack is recorded too, so that its re-send is not counted late twice.
local done = recorded(pool.calls, 'ack:' .. batch_id)
if done == 'late' then return {LATE, 0, 0} end
if done then return {DONE, 0, calls > 0 and 1 or 0} end
-- Ids that succeeded are recorded by the guard either way (a late ack too), so their returned
-- copies are skipped.
if processed_guard_ms > 0 and #ARGV > last then
  forget_expired(pool.done, now)
  for i = last + 1, #ARGV do redis.call('ZADD', pool.done, now + processed_guard_ms, ARGV[i]) end
end
if calls < 0 then
  if named > 0 then redis.call('HINCRBY', pool.stats, 'late', named) end
  record_call(pool.calls, pool.calls_at, 'ack:' .. batch_id, 'late', now)
  return {LATE, 0, 0}
end
if named ~= calls or unsettled > calls then
  return redis.error_reply('ERR pool_ack: batch holds ' .. calls .. ' calls, the ack names ' .. named)
end
-- The batch's entries by id, read only when a call failed: a retried or dead-lettered entry goes
-- back with what was kept about it. A record that cannot be decoded leaves its failed calls
-- counted as failed.
local entries = {}
if unsettled > 0 then
  local packed = redis.call('HGET', pool.inflight_items, batch_id) or ''
  for _, entry in ipairs(pool_unpack_batch(packed, nil, pool.coalesce) or {}) do
    entries[entry[6]] = entry
  end
end
-- Deletions first: at maxmemory, a script that has written may go on writing (an ack frees).
redis.call('HDEL', pool.inflight_calls, batch_id)
redis.call('HDEL', pool.inflight_items, batch_id)
record_call(pool.calls, pool.calls_at, 'ack:' .. batch_id, 1, now)

local failed, retried, buried, back, kept = 0, 0, 0, 0, {}
for i = 12, last, 4 do
  local id, count, err, mark = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local entry, bad, delay = entries[id], string.sub(mark, 1, 1) == '!', tonumber(string.match(mark, '^@(%d+)$'))
  if bad or (entry and (mark == 'd' or (delay and entry[4] >= max_receives))) then
    -- ('!' and the raw payload: one the worker could not decode, which can never succeed.)
    pool_bury(pool, bad and string.sub(mark, 2) or entry[7], count, entry and entry[4] or 1, err, now)
    buried = buried + count
  elseif entry and delay and delay > 0 then
    -- Back as a delayed call that keeps its receives and count (pool_due.lua offers it); its
    -- member's id is unique (`seq` only grows; pool_due gives it a fresh one when it is due).
    local seq = redis.call('HINCRBY', pool.stats, 'seq', 1)
    redis.call('ZADD', pool.scheduled, now + delay, string.format('%x/%d/%d:%.17g:%s', seq, entry[4], count, entry[2], entry[7]))
    retried = retried + count
  elseif entry and delay then
    -- Back now: kept in the batch for pool_ack_back, as pool_unpack_batch reads it.
    back = back + count
    for j = 1, 5 do kept[#kept + 1] = entry[j] end
    kept[#kept - 2] = count
  else
    failed = failed + count
  end
end
if back > 0 then
  redis.call('HSET', pool.inflight_calls, batch_id, back)
  redis.call('HSET', pool.inflight_items, batch_id, cmsgpack.pack(5, kept))
else
  redis.call('ZREM', pool.inflight, batch_id)
end
local processed = calls - unsettled
add_counts(pool.stats, {in_flight = back - calls, processed = processed, failed = failed,
                     retried = retried, depth = retried})
tick(pool.flow, 'out', processed + failed + buried, now)
tick(pool.flow, 'busy', busy, now)
tick(pool.flow, 'done', processed + failed + buried, now)
-- Retried calls need a drain job unless one holds the flag (for delayed ones, the job's pop
-- schedules the job that offers them when due).
local send = retried > 0 and redis.call('SET', pool.drains, 1, 'NX', 'PX', pool.lease)
return {HELD, send and 1 or 0, back > 0 and 1 or 0}
