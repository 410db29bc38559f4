-- Settle one reservation: commit it, put it back (now or after a delay), or dead-letter it.
-- KEYS and ARGV[1..7]: see bucket_common.lua.
-- ARGV[8] reservation id, ARGV[9] action: commit | release | dead
-- ARGV[10] release: delay ms before the key may release again; dead: the error text
-- ARGV[11] processed-guard window ms (commit; 0: off), ARGV[12] seconds the body took
-- Returns 0 when the reservation is not (or no longer) held (a late commit is counted as
-- `late`), else 1; 2 means the drain flag was armed here and the caller should send a drain
-- job. A commit of a reservation the reaper took back still records the item's id for the processed-guard, so its returned copy
-- is skipped rather than applied twice.
--#include bucket_common
local reservation, action = ARGV[8], ARGV[9]
local now = now_ms()
if action == 'commit' and tonumber(ARGV[11]) > 0 then
  forget_expired(K_DONE, now)
  redis.call('ZADD', K_DONE, now + tonumber(ARGV[11]), string.match(reservation, '^(%d+)'))
end

local key, slot = take_reservation(reservation)
if not key then
  -- A late commit: the reaper took the item back (it may run again); counted, not applied.
  if action == 'commit' then redis.call('HINCRBY', K_STATS, 'late', 1) end
  return 0
end
tick(K_FLOW, 'busy', tonumber(ARGV[12]), now)

local result = 1
if action == 'commit' then
  redis.call('HINCRBY', K_STATS, 'processed', 1)
  redis.call('HINCRBY', K_KEYSTATS, key .. '\0processed', 1)
  tick(K_FLOW, 'out', 1, now)
  tick(K_FLOW, 'done', 1, now)
elseif action == 'release' then
  -- Back to the head of its key's queue; the whole key waits out the delay (an HTTP 429 is
  -- about the key, and the key's order is kept).
  push_head(key, slot)
  local when = eligible_at(key, now + tonumber(ARGV[10]))
  -- GT: never pull an already later eligibility forward; adds the key when it is absent.
  redis.call('ZADD', K_READY, 'GT', when, key)
  if arm_drain(now) == 1 then result = 2 end
else
  bury(key, slot, ARGV[10], now)
  tick(K_FLOW, 'out', 1, now)
  tick(K_FLOW, 'done', 1, now)
end

-- An ordered key waits for its in-flight item; once settled, its next item may go.
if ORDERED and action ~= 'release' then make_eligible(key, now) end
return result
