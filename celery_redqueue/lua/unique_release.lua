-- Release a lock if the caller still holds it (fenced: a token that lost it changes nothing).
-- KEYS[1..5]: the lock table's keys (unique_keys.lua names each).
-- ARGV[1] lock key
-- ARGV[2] token of the caller's lease
-- ARGV[3] hand back: ms to keep the key for the same task's next message (a retry), with the
--         task id as the token and phase 'queued'; 0 to delete it
-- ARGV[4] the task id (read with ARGV[3] only)
-- Reply: 1 when released; 0 when the token does not hold the key (another holder has it, or
-- it was released, or its lease ran out: then it is forgotten here and counted as lost);
-- 2 when this release was applied already (a re-send). Bounded: O(log N).
-- Lost reply: safe to run twice: the release is recorded under its token (record_call.lua)
-- and a second run replies "already done" (2) and changes nothing.
--#include unique_keys
--#include unique_check
--#include unique_entry
--#include lease_now
--#include record_call
--#include recorded
local NOT_HELD, RELEASED, ALREADY_RELEASED = 0, 1, 2
local locks = unique_keys(KEYS)
unique_check(locks)
local key, token, hand_back_ms, task = ARGV[1], ARGV[2], tonumber(ARGV[3] or '0'), ARGV[4]
if not hand_back_ms or hand_back_ms < 0 or (hand_back_ms > 0 and not task) then
  return redis.error_reply('ERR unique_release: bad hand-back')
end
local raw = redis.call('HGET', locks.held, key)
if not raw or unique_entry(locks, key, raw).token ~= token then
  if recorded(locks.calls, 'release:' .. token) == '1' then return ALREADY_RELEASED end
  return NOT_HELD
end
local now = lease_now()
local entry = unique_entry(locks, key, raw)
local expiry = tonumber(redis.call('ZSCORE', locks.expiry, key) or '0')
local held = RELEASED
if expiry <= now then
  held = NOT_HELD
  redis.call('HINCRBY', locks.stats, 'lost', 1)
end
if held == RELEASED and hand_back_ms > 0 then
  redis.call('HINCRBY', locks.stats, 'handed_back', 1)
  entry.token, entry.task, entry.phase = task, task, 'queued'
  redis.call('HSET', locks.held, key, cjson.encode(entry))
  redis.call('ZADD', locks.expiry, now + hand_back_ms, key)
else
  if held == RELEASED then redis.call('HINCRBY', locks.stats, 'released', 1) end
  redis.call('HDEL', locks.held, key)
  redis.call('ZREM', locks.expiry, key)
end
record_call(locks.calls, locks.calls_at, 'release:' .. token, held, now)
return held
