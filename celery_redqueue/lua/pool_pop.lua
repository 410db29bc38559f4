-- Move due delayed calls in, pop up to n entries as one in-flight batch, plan the drain jobs.
-- An entry received before (returned by the reaper or a failed ack) is popped alone: a batch of
-- one when it comes first, else it waits for a later pop (a call that killed its batch's
-- process cannot take good calls down with it again).
-- KEYS[1..20]: the pool's keys (pool_common.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] n, ARGV[6] batch id, ARGV[7] batch timeout ms, ARGV[8] most drain jobs at once,
-- ARGV[9] processed-guard (1|0): skip entries whose id completed already,
-- ARGV[10] linger (1|0): an empty pool keeps the drain flag (the drain looks again soon),
-- ARGV[11] listen ms, ARGV[12] listener id: a pop that takes nothing (EMPTY, LINGER) lists the
-- listener on the wake signal for that long, or (0, and LATER) takes it off (wake_signal.lua).
-- ARGV[13] at least once (1|0): popped entries may go back, so a sample pool keeps their scores.
-- Reply: {status, fan_out, remaining, wait_ms, schedule, malformed, then the entries as
-- pool_batch.lua's reply_entries lists them: k, k members (id:payload, or the payload when
-- coalescing), then position, count, receives of each entry whose count or receives is not 1};
-- status (drain_lease.lua): TAKEN, EMPTY (flag cleared in this step),
-- LINGER, AGAIN (only guard-skipped entries were popped), LATER (only delayed calls remain,
-- the first due in wait_ms; the flag was released, and schedule = 1 asks the caller for a
-- drain job with that countdown). malformed: entries dead-lettered here.
-- Lost reply: safe to run twice: a pop whose batch id is in flight already replies that batch
-- again (TAKEN, no fan-out) and pops nothing, in both delivery modes (the entries are kept with
-- the batch either way; the reaper returns them only at least once).
--#include pool_common
--#include pool_entries
--#include pool_batch
--#include wake_signal
local n, batch_id, timeout_ms = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local max_drains = tonumber(ARGV[8])
local guard, linger, listen = ARGV[9] == '1', ARGV[10] == '1', tonumber(ARGV[11]) or 0
local listener = ARGV[12] or ''
local scored = ARGV[13] == '1' and POLICY == 'sample'
local now = pool_now()
local result = {TAKEN, 0, 0, -1, 0, 0}
if redis.call('HEXISTS', K_INFLIGHT_CALLS, batch_id) == 1 then
  -- A re-sent pop: its first run's reply was lost. The same batch, its deadline pushed.
  local entries = unpack_batch(redis.call('HGET', K_INFLIGHT_ITEMS, batch_id) or '') or {}
  local members, counts, receives = {}, {}, {}
  for i, e in ipairs(entries) do members[i], counts[i], receives[i] = e[1], e[3], e[4] end
  result[3] = redis.call('ZCARD', K_ITEMS)
  redis.call('ZADD', K_INFLIGHT, 'XX', now + timeout_ms, batch_id)
  return reply_entries(result, members, counts, receives)
end
local malformed = offer_due(n, now)

local kept, calls, skipped, guarded = {}, 0, 0, 0
local members, counts, receives = {}, {}, {}
local record
-- No receive count kept, no guard, not coalescing: what is popped is fresh, all of it goes.
local fresh = not guard and not COALESCE and redis.call('EXISTS', K_RECEIVES) == 0
-- Entries the guard skips are not delivered; look again (a bounded number of times) so that a
-- pop returns nothing only when the pool is really empty.
for _ = 1, 10 do
  local taken, slots
  if fresh then
    local step, range = 1, nil
    if scored then
      step, range = 2, redis.call('ZRANGE', K_ITEMS, 0, n - 1, 'WITHSCORES')
    else
      range = redis.call('ZRANGE', K_ITEMS, 0, n - 1)
    end
    if #range == 0 then break end
    taken, slots = fresh_entries(range, step)
    if taken then
      redis.call('ZREMRANGEBYRANK', K_ITEMS, 0, #taken - 1)
      depart(K_AGES, K_ARRIVALS, slots)
      members, counts, calls, record = taken, nil, #taken, cmsgpack.pack(step, range)
      break
    end
  end
  local range = redis.call('ZRANGE', K_ITEMS, 0, n - 1, 'WITHSCORES')
  if #range == 0 then break end
  local e = read_entries(range, guard, now)
  local gone, alone = {}, false
  for i = 1, #range / 2 do
    local bad, done = e.bad[i], e.done[i]
    -- An entry received before came back from a batch that died or failed: it goes alone,
    -- so a call that kills its process kills only itself. Later pops hand it out.
    local again = not bad and not done and e.receives[i] > 1
    if alone or (again and calls > 0) then
      -- Left waiting for a later pop.
    else
      gone[#gone + 1] = i
      local count = e.count[i]
      if bad then
        bury(e.member[i], count, e.receives[i], bad, now)
        malformed, skipped = malformed + count, skipped + count
      elseif done then
        -- A redelivered entry whose body already completed: it is not applied twice.
        guarded, skipped = guarded + count, skipped + count
      else
        calls, alone = calls + count, again
        local j = #members + 1
        members[j], counts[j], receives[j] = e.member[i], count, e.receives[i]
        local at = #kept
        kept[at + 1], kept[at + 2], kept[at + 3] = e.member[i], e.score[i], count
        kept[at + 4], kept[at + 5] = e.receives[i], e.offered[i]
      end
    end
  end
  forget_entries(e, gone, #gone == #range / 2)
  if calls > 0 then break end
end
result[6] = malformed
if calls + skipped > 0 then redis.call('HINCRBY', K_STATS, 'depth', -(calls + skipped)) end
if guarded > 0 then
  add_counts(K_STATS, {guard_skipped = guarded, processed = guarded})
  pool_tick('out', guarded, now)
end
if calls == 0 then
  local first = redis.call('ZRANGE', K_SCHEDULED, 0, 0, 'WITHSCORES')
  local when = #first > 0 and tonumber(first[2]) or nil
  if redis.call('ZCARD', K_ITEMS) > 0 or (when and when <= now) then
    result[1] = AGAIN
  elseif when then
    -- Only delayed calls remain: release the flag, so that a call due now sends its own job
    -- (a delayed call never holds back an immediate one), and schedule one job for them.
    redis.call('DEL', K_DRAINS)
    local _, wait = plan_drain(K_DRAINS, K_WAKE, DRAIN_LEASE_MS, now, when)
    result[1], result[4], result[5] = LATER, math.ceil(when - now), wait >= 0 and 1 or 0
  elseif linger then
    redis.call('PEXPIRE', K_DRAINS, DRAIN_LEASE_MS)
    result[1] = LINGER
  else
    redis.call('DEL', K_DRAINS, K_WAKE)
    result[1] = EMPTY
  end
  -- LATER ends the drain (a job is scheduled for the delayed calls): it stops listening.
  if result[1] ~= AGAIN then
    listen_for(K_LISTENING, K_SIGNAL, listener, result[1] == LATER and 0 or listen, now)
  end
  result[7] = 0
  return result
end

redis.call('ZADD', K_INFLIGHT, now + timeout_ms, batch_id)
redis.call('HSET', K_INFLIGHT_CALLS, batch_id, calls)
-- Kept at most once too, so that a re-sent pop can reply them (only the reaper of an
-- at-least-once pool returns them).
redis.call('HSET', K_INFLIGHT_ITEMS, batch_id, record or cmsgpack.pack(5, kept))
redis.call('HINCRBY', K_STATS, 'in_flight', calls)
local remaining = redis.call('ZCARD', K_ITEMS)
-- One drain job per batch still waiting, up to the fan-out limit.
result[2], result[3] = claim_drain(K_DRAINS, DRAIN_LEASE_MS, max_drains, remaining / n), remaining
return reply_entries(result, members, counts, receives)
