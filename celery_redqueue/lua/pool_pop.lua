-- Pop up to n fresh entries as one in-flight batch and plan the drain jobs: the common pop
-- (entries never received before, not coalesced, no processed guard, all well formed), which
-- also ends a drain when the pool is empty. What it does not do it names in its status and
-- writes nothing: UPKEEP when delayed calls are due (the caller runs pool_due, which offers
-- them, then pops again), MIXED when the entries need the general pop (the caller runs
-- pool_pop_mixed with the same arguments).
-- KEYS[1..21]: the pool's keys (pool_keys.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] n, ARGV[6] batch id, ARGV[7] batch timeout ms, ARGV[8] most drain jobs at once,
-- ARGV[9] processed-guard (1|0): skip entries whose id completed already (pool_pop_mixed),
-- ARGV[10] linger (1|0): an empty pool keeps the drain flag (the drain looks again soon),
-- ARGV[11] listen ms, ARGV[12] listener id: a pop that takes nothing (EMPTY, LINGER) lists the
-- listener on the wake signal for that long, or (0, and LATER) takes it off (listen_for.lua).
-- ARGV[13] at least once (1|0): popped entries may go back, so a sample pool keeps their scores.
-- ARGV[14] due first (1|0): reply UPKEEP when delayed calls are due (0: pool_due just ran).
-- Reply: {status, fan_out, remaining, wait_ms, schedule, malformed, then the entries as
-- pool_reply_entries.lua lists them: k, k members (id:payload, or the payload when
-- coalescing), then position, count, receives of each entry whose count or receives is not 1};
-- status (take_status.lua): TAKEN, EMPTY (flag cleared in this step), LINGER, AGAIN (due
-- delayed calls wait: pop again), LATER (only delayed calls remain, the first due in wait_ms;
-- the flag was released, and schedule = 1 asks the caller for a drain job with that
-- countdown), UPKEEP, MIXED. malformed: always 0 here (pool_due, pool_pop_mixed count theirs).
-- Bounded: O(n log N).
-- Lost reply: safe to run twice: a pop whose batch id is in flight already replies that batch
-- again (TAKEN, no fan-out) and pops nothing, in both delivery modes (the entries are kept with
-- the batch either way; the reaper returns them only at least once); UPKEEP and MIXED wrote
-- nothing, and an empty pop's end (the flag, the listener) is the same done twice.
--#include clock
--#include take_status
--#include plan_drain
--#include listen_for
--#include pool_keys
--#include pool_fresh
--#include pool_depart
--#include pool_replay
--#include pool_reply_entries
--#include pool_hold
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local n, batch_id, timeout_ms = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local max_drains = tonumber(ARGV[8])
local guard, linger, listen = ARGV[9] == '1', ARGV[10] == '1', tonumber(ARGV[11]) or 0
local listener, due_first = ARGV[12] or '', ARGV[14] == '1'
local scored = ARGV[13] == '1' and pool.policy == 'sample'
local now = math.floor(now_ms())
local result = {TAKEN, 0, 0, -1, 0, 0}
check_keys({pool.items, 'zset', pool.scheduled, 'zset', pool.inflight, 'zset',
  pool.inflight_calls, 'hash', pool.inflight_items, 'hash', pool.listening, 'zset',
  pool.signal, 'list', pool.drains, 'string', pool.wake, 'string', pool.receives, 'hash',
  pool.ages, 'zset', pool.arrivals, 'hash'}, pool.stats)
local replayed = pool_replay(pool, batch_id, timeout_ms, now, result)
if replayed then return replayed end

local first = redis.call('ZRANGE', pool.scheduled, 0, 0, 'WITHSCORES')
local when = #first > 0 and tonumber(first[2]) or nil
if due_first and when and when <= now then
  result[1] = UPKEEP
  return pool_reply_entries(result, {})
end
local step, range = 1, nil
if scored then
  step, range = 2, redis.call('ZRANGE', pool.items, 0, n - 1, 'WITHSCORES')
else
  range = redis.call('ZRANGE', pool.items, 0, n - 1)
end

if #range == 0 then
  if when and when <= now then
    result[1] = AGAIN
  elseif when then
    -- Only delayed calls remain: release the flag, so that a call due now sends its own job
    -- (a delayed call never holds back an immediate one), and schedule one job for them.
    redis.call('DEL', pool.drains)
    local _, wait = plan_drain(pool.drains, pool.wake, pool.lease, now, when)
    result[1], result[4], result[5] = LATER, math.ceil(when - now), wait >= 0 and 1 or 0
  elseif linger then
    redis.call('PEXPIRE', pool.drains, pool.lease)
    result[1] = LINGER
  else
    redis.call('DEL', pool.drains, pool.wake)
    result[1] = EMPTY
  end
  -- LATER ends the drain (a job is scheduled for the delayed calls): it stops listening.
  if result[1] ~= AGAIN then
    listen_for(pool.listening, pool.signal, listener, result[1] == LATER and 0 or listen, now)
  end
  return pool_reply_entries(result, {})
end

-- A receive count or a debounced call's count kept, the guard, coalescing or a malformed
-- member: the general pop's work.
local taken, slots
if not (guard or pool.coalesce) and redis.call('EXISTS', pool.receives, pool.counts) == 0 then
  taken, slots = pool_fresh(range, step)
end
if not taken then
  result[1] = MIXED
  return pool_reply_entries(result, {})
end
-- pool_depart counts the entries out of their arrival slots: read them before they leave.
for slot in pairs(slots) do
  local held = redis.call('HGET', pool.arrivals, slot)
  if held and not string.match(held, '^%-?%d+$') then error('CORRUPT ' .. pool.arrivals .. ' field ' .. slot .. ': not an integer', 0) end
end
redis.call('ZREMRANGEBYRANK', pool.items, 0, #taken - 1)
pool_depart(pool.ages, pool.arrivals, slots)
redis.call('HINCRBY', pool.stats, 'depth', -#taken)
-- One drain job per batch still waiting, up to the fan-out limit.
result[2], result[3] = pool_hold(pool, batch_id, #taken, cmsgpack.pack(step, range), timeout_ms,
  max_drains, n, now)
return pool_reply_entries(result, taken)
