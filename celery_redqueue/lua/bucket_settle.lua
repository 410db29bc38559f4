-- Settle one reservation: commit it, put it back to retry later (after a delay), put it back
-- and pause its key (backoff: an upstream's 429), or bury it.
-- KEYS[1..26]: the bucket's keys (bucket_common.lua names each).
-- ARGV[1..7]: the bucket's settings (bucket_common.lua).
-- ARGV[8] reservation id, ARGV[9] action: commit | retry | backoff | dead
-- ARGV[10] retry, backoff: delay ms before the key may release again; dead: the error text
-- ARGV[11] processed-guard window ms (commit; 0: off), ARGV[12] seconds the body took
-- ARGV[13] the call's actual cost as the body reported it ('' when it did not): the key's cost
-- window is corrected by (actual - charged), a refund only in the window the call was charged
-- in (bucket_limits.lua's charge_cost). A backoff that reported none refunds the charge
-- (the upstream refused the call); its receive is not counted, so it is never dead-lettered
-- for backing off.
-- Reply: {held, send_drain}. held 0: the reservation is not (or no longer) held (a late commit
-- is counted as `late`); 2: this settle was applied already (a re-send); send_drain 1: the drain flag was armed here, the caller should send a
-- drain job. A commit of a reservation the reaper took back still records the item's id for
-- the processed-guard, so its returned copy is skipped rather than applied twice.
-- Lost reply: safe to run twice: the settle is recorded (call_records.lua) under the reservation
-- id, and a second run replies "already done" (held 2) and changes nothing.
--#include bucket_common
local reservation, action, detail = ARGV[8], ARGV[9], ARGV[10]
local processed_guard_ms, busy = tonumber(ARGV[11]), tonumber(ARGV[12])
local actual = tonumber(ARGV[13] or '')
if action ~= 'commit' and action ~= 'retry' and action ~= 'dead' and action ~= 'backoff' then
  return redis.error_reply('ERR bucket_settle: bad action ' .. tostring(action))
end
if (action == 'retry' or action == 'backoff') and not tonumber(detail) then
  return redis.error_reply('ERR bucket_settle: bad delay ' .. tostring(detail))
end
local now = now_ms()
if action == 'commit' and processed_guard_ms > 0 then
  forget_expired(K_DONE, now)
  redis.call('ZADD', K_DONE, now + processed_guard_ms, string.match(reservation, '^(%d+)'))
end

local key, slot = take_reservation(reservation)
if not key then
  if recorded(K_CALLS, 'settle:' .. reservation) then return {2, 0} end
  -- A late commit: the reaper took the item back (it may run again); counted, not applied.
  if action == 'commit' then redis.call('HINCRBY', K_STATS, 'late', 1) end
  return {0, 0}
end
record_call(K_CALLS, K_CALLS_AT, 'settle:' .. reservation, 1, now)
tick(K_FLOW, 'busy', busy, now)
local receives, id, at, payload, charged, window = parse_slot(slot)
if action == 'backoff' and not actual then actual = 0 end
if actual and receives then charge_cost(key, actual - (charged or 1), now, window) end

local send = 0
if action == 'commit' then
  redis.call('HINCRBY', K_STATS, 'processed', 1)
  redis.call('HINCRBY', K_KEYSTATS, key .. '\0processed', 1)
  tick(K_FLOW, 'out', 1, now)
  tick(K_FLOW, 'done', 1, now)
elseif action == 'retry' or action == 'backoff' then
  if action == 'backoff' then
    -- The key is paused for every worker (GT: a longer pause, or one until resumed, stays);
    -- the call goes back as it came, its receive not counted. Pauses that ran out are
    -- forgotten here (and in bucket_pause.lua), where they are added.
    forget_expired(K_PAUSED, now)
    redis.call('ZADD', K_PAUSED, 'GT', now + tonumber(detail), key)
    redis.call('HINCRBY', K_STATS, 'backoffs', 1)
    redis.call('HINCRBY', K_KEYSTATS, key .. '\0backoffs', 1)
    if receives then slot = make_slot(math.max(receives - 1, 0), id, at, payload, charged) end
  end
  -- Back to the head of its key's queue; the whole key waits out the delay (an HTTP 429 is
  -- about the key, and the key's order is kept).
  push_head(key, slot)
  local when = eligible_at(key, now + tonumber(detail))
  -- GT: never pull an already later eligibility forward; adds the key when it is absent (it
  -- has room: this call left it). A key paused until resumed stays out.
  if when < math.huge then redis.call('ZADD', K_READY, 'GT', when, key) end
  send = arm_drain(now)
else
  bury(key, slot, detail, now)
  tick(K_FLOW, 'out', 1, now)
  tick(K_FLOW, 'done', 1, now)
end

-- A key at its concurrency limit (an ordered key: one in flight) left the ready set; once a
-- call settles, its next may go. A correction of its cost moves its place in the ready set.
if CONCURRENCY > 0 and action ~= 'retry' and action ~= 'backoff' then make_eligible(key, now) end
-- (A key eligible already keeps its place unless the correction puts it in the future.)
local score = actual and COST_INTERVAL > 0 and tonumber(redis.call('ZSCORE', K_READY, key))
if score then
  local when = eligible_at(key, 0)
  if when < math.huge and (when > now or score > now) then
    redis.call('ZADD', K_READY, 'XX', math.max(when, now), key)
  end
end
return {1, send}
