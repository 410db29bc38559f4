-- Settle one reservation: commit it, put it back to retry later (after a delay), or bury it.
-- KEYS[1..19]: the bucket's keys (bucket_common.lua names each).
-- ARGV[1..7]: the bucket's settings (bucket_common.lua).
-- ARGV[8] reservation id, ARGV[9] action: commit | retry | dead
-- ARGV[10] retry: delay ms before the key may release again; dead: the error text
-- ARGV[11] processed-guard window ms (commit; 0: off), ARGV[12] seconds the body took
-- Reply: {held, send_drain}. held 0: the reservation is not (or no longer) held (a late commit
-- is counted as `late`); send_drain 1: the drain flag was armed here, the caller should send a
-- drain job. A commit of a reservation the reaper took back still records the item's id for
-- the processed-guard, so its returned copy is skipped rather than applied twice.
--#include bucket_common
local reservation, action, detail = ARGV[8], ARGV[9], ARGV[10]
local processed_guard_ms, busy = tonumber(ARGV[11]), tonumber(ARGV[12])
if action ~= 'commit' and action ~= 'retry' and action ~= 'dead' then
  return redis.error_reply('ERR bucket_settle: bad action ' .. tostring(action))
end
local now = now_ms()
if action == 'commit' and processed_guard_ms > 0 then
  forget_expired(K_DONE, now)
  redis.call('ZADD', K_DONE, now + processed_guard_ms, string.match(reservation, '^(%d+)'))
end

local key, slot = take_reservation(reservation)
if not key then
  -- A late commit: the reaper took the item back (it may run again); counted, not applied.
  if action == 'commit' then redis.call('HINCRBY', K_STATS, 'late', 1) end
  return {0, 0}
end
tick(K_FLOW, 'busy', busy, now)

local send = 0
if action == 'commit' then
  redis.call('HINCRBY', K_STATS, 'processed', 1)
  redis.call('HINCRBY', K_KEYSTATS, key .. '\0processed', 1)
  tick(K_FLOW, 'out', 1, now)
  tick(K_FLOW, 'done', 1, now)
elseif action == 'retry' then
  -- Back to the head of its key's queue; the whole key waits out the delay (an HTTP 429 is
  -- about the key, and the key's order is kept).
  push_head(key, slot)
  local when = eligible_at(key, now + tonumber(detail))
  -- GT: never pull an already later eligibility forward; adds the key when it is absent.
  redis.call('ZADD', K_READY, 'GT', when, key)
  send = arm_drain(now)
else
  bury(key, slot, detail, now)
  tick(K_FLOW, 'out', 1, now)
  tick(K_FLOW, 'done', 1, now)
end

-- An ordered key waits for its in-flight item; once settled, its next item may go.
if ORDERED and action ~= 'retry' then make_eligible(key, now) end
return {1, send}
