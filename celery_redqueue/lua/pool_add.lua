-- Offer calls to a capped pool (or hold them until due), and plan the drain job they need.
-- KEYS: the first thirteen of pool_common.lua's, as this line names them:
-- Parts: items counts stats drains receives ages arrivals flow scheduled dedupe wake signal listening
-- ARGV[1..4]: common (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] dedupe window ms (0: no producer-side deduplication)
-- ARGV[6], ARGV[7], ... groups of 4: random score in [0, 1), payload, dedupe id ('' for none),
-- delay ms (0: now)
-- Returns {send_drain, wake_in_ms, status...}: send_drain 1 means "send a drain job now";
-- wake_in_ms >= 0 means "send a drain job with this countdown" (no job is scheduled earlier).
-- Status: 0 refused, 1 kept, 2 kept and an older entry evicted, 3 merged into an equal entry,
-- 4 refused as a duplicate, 5 held until due. Bounded: O(batch * log N).
-- Calls with no dedupe id and no delay run pool_add_plain instead (pool.py's _add_plain); here
-- what a call does not use (dedupe, the delayed set, the wake key) still costs nothing.
-- Lost reply: raises (a store: a second run would keep the calls twice; pass dedupe ids to make
-- calling again safe)
--#include pool_common
--#include pool_offer
--#include wake_signal
local window = tonumber(ARGV[5])
local calls = (#ARGV - 5) / 4
local dedupe, any_delay = false, false
for i = 6, #ARGV, 4 do
  local delay = tonumber(ARGV[i + 3])
  if not tonumber(ARGV[i]) or not delay then
    return redis.error_reply('ERR pool_add: call ' .. (i - 2) / 4 .. ' has a bad score or delay')
  end
  if delay > 0 then any_delay = true end
  if ARGV[i + 2] ~= '' then dedupe = true end
end
dedupe = dedupe and window > 0

local now = pool_now()
-- Forget a few expired dedupe ids whenever ids are recorded: bounded work, and the set cannot
-- grow unbounded (each id recorded forgets up to 100 expired ones).
if dedupe then forget_expired(K_DEDUPE, now) end

-- Ids for the whole batch in one step (a duplicate leaves a gap: ids need only be unique and
-- carry the arrival, pool_ids.lua).
local seq = take_ids(K_STATS, calls, now)
local c = {accepted = 0, rejected = 0, evicted = 0, depth = 0, duplicates = 0, delayed = 0}
local result = {0, -1}
offer_each(seq, now, dedupe, window, result, c)

-- One HINCRBY per counter that moved (add_counts skips zeros).
c.offered = c.accepted + c.rejected
add_counts(K_STATS, c)
pool_tick('in', c.offered, now)

-- One wake mechanism for immediate and delayed calls (plan_drain in common.lua): entries
-- waiting need a drain job now unless one holds the flag; delayed calls need one scheduled
-- for the first of them unless one is scheduled no later. A call that kept an entry knows
-- the pool is not empty without asking.
-- A listener waiting on the wake signal (wake_signal.lua) is woken and takes kept calls itself;
-- for delayed calls its look answers LATER and it plans their wake-up itself (no job here).
local woken = c.accepted + c.delayed > 0
  and wake_listener(K_LISTENING, K_SIGNAL, DRAIN_LEASE_MS, now)
local send, wait
if woken then
  send, wait = 0, -1
elseif c.accepted > 0 and not any_delay then
  send, wait = plan_drain(K_DRAINS, K_WAKE, DRAIN_LEASE_MS, now, now)
else
  send, wait = plan_pool_drain(now)
end
result[1], result[2] = send, wait
return result
