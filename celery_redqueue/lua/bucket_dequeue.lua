-- Release the head item of the key that has been eligible longest, and reserve it.
-- KEYS[1..26]: the bucket's keys (bucket_common.lua names each).
-- ARGV[1..7]: the bucket's settings (bucket_common.lua).
-- ARGV[8] reservation timeout ms, ARGV[9] most drain jobs at once (fan-out limit),
-- ARGV[10] processed-guard (1|0): skip items whose id completed already,
-- ARGV[11] poll id (unique, chosen by the caller): the reservation is recorded under it,
-- ARGV[12] listen ms, ARGV[13] listener id, ARGV[14] linger (1|0): a poll that releases nothing
-- lists the listener on the wake signal for that long (LATER with something due within it;
-- EMPTY only when lingering), else takes it off (wake_signal.lua).
-- ARGV[15] ahead ms (0: off): a key due within it is released now at its slot (its schedules
-- advance from the slot, not from a later wake-up); the caller waits out the lead before the
-- body runs, without a wake-up round trip (never across a cost window: see below).
-- Reply: a status first (drain_lease.lua), malformed last (entries dead-lettered by this call
-- because they could not be read):
--   {UPKEEP, malformed}               delayed items came due, or a release would begin a new
--                                     minute: run bucket_upkeep.lua, then poll again (nothing
--                                     was reserved)
--   {EMPTY, malformed}                nothing queued or due (the drain flag was cleared here)
--   {LATER, wait_ms, schedule, malformed}  items queued or delayed, none may go for wait_ms
--                                     more; the flag was released, and schedule = 1 asks the
--                                     caller for a drain job with that countdown
--   {TAKEN, key, reservation id, payload, receives, deadline ms, released ms, fan_out, cost,
--    lead ms, malformed}            cost: the call's units ('' when it has none); lead: how
--                                   long after now it was released at (ahead), else 0
-- Times go back as "%.17g" strings: tostring() keeps 14 digits, which rounds ms timestamps
-- to 0.1 ms and would let a fast key with a burst drift above its rate. Bounded: O(log K)
-- (plus at most 100 skipped items).
-- Lost reply: safe to run twice: a poll whose id recorded a reservation still held replies that
-- reservation again (no fan-out) and takes nothing.
--#include bucket_common
--#include bucket_entries
--#include wake_signal
local timeout_ms, max_drains, guard = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10] == '1'
local poll_id, listen = 'poll:' .. ARGV[11], tonumber(ARGV[12]) or 0
local listener, linger = ARGV[13] or '', ARGV[14] == '1'
local now = now_ms()
local ahead = tonumber(ARGV[15]) or 0
local taken = recorded(K_CALLS, poll_id)
if taken and redis.call('HEXISTS', K_RES_KEYS, taken) == 1 then
  -- A re-sent poll: its first run's reply was lost. The same reservation again, released at
  -- the same slot (its deadline less the timeout: nothing renews a reservation its drain has
  -- not seen), so a call reserved ahead still waits out what is left of its lead.
  local receives, _, _, payload, cost = parse_slot(redis.call('HGET', K_RES_ITEMS, taken))
  local deadline = tonumber(redis.call('ZSCORE', K_INFLIGHT, taken) or '') or now + timeout_ms
  local at_ms = deadline - timeout_ms
  return {TAKEN, redis.call('HGET', K_RES_KEYS, taken), taken, payload, receives,
          string.format('%.17g', deadline), string.format('%.17g', at_ms), 0,
          cost and string.format('%.17g', cost) or '',
          string.format('%.17g', math.max(at_ms - now, 0)), 0}
end
local malformed = 0
-- Due delayed items join their keys' queues first (bucket_upkeep.lua, a rare step).
local first_due = redis.call('ZRANGE', K_SCHEDULED, 0, 0, 'WITHSCORES')
if #first_due > 0 and tonumber(first_due[2]) <= now then return {UPKEEP, malformed} end
local minute = math.floor(now / 60000)

-- Nothing may go before `when`: release the flag (so an item due sooner sends its own job)
-- and have one drain job scheduled for `when` unless one is scheduled no later.
-- Reserving ahead, the caller is told to come back `ahead` early, to find it within reach;
-- so is the drain job (the wake key then vanishes when that job comes, not after: a job that
-- found the key of its own wake-up would think another job was coming).
local function sleep_until(when)
  listen_for(K_LISTENING, K_SIGNAL, listener, when - now <= listen and listen or 0, now)
  if when - ahead > now then when = when - ahead end
  redis.call('DEL', K_DRAINS)
  local _, wait = plan_drain(K_DRAINS, K_WAKE, DRAIN_LEASE_MS, now, when)
  return {LATER, string.format('%.17g', when - now), wait >= 0 and 1 or 0, malformed}
end

for _ = 1, 100 do
  local top = redis.call('ZRANGE', K_READY, 0, 0, 'WITHSCORES')
  local first_due = redis.call('ZRANGE', K_SCHEDULED, 0, 0, 'WITHSCORES')
  local due_at = #first_due > 0 and tonumber(first_due[2]) or nil
  if #top == 0 then
    if due_at then return sleep_until(due_at) end
    -- Nothing is eligible until a new item, a commit (ordered keys) or the reaper adds a key;
    -- the drain flag is cleared in this same step so that the next enqueue sends a job.
    redis.call('DEL', K_DRAINS, K_WAKE)
    listen_for(K_LISTENING, K_SIGNAL, listener, linger and listen or 0, now)
    return {EMPTY, malformed}
  end
  local key, when = top[1], tonumber(top[2])
  -- Under a total rate the key eligible longest still goes first, when the total allows.
  when = math.max(when, total_ready_at())
  -- The head's cost must fit its key's cost window; its ready time may have been set for
  -- another head (the reaper puts a call back at the head of a key eligible already).
  local cost_at = cost_ready_at(key)
  -- Released ahead, a call is charged in the window of its slot; within the current one only.
  local lead = when > now and when <= now + ahead and (due_at == nil or due_at >= when)
    and (COST_INTERVAL <= 0 or cost_window(key, when) == cost_window(key, now))
  if cost_at > when then
    redis.call('ZADD', K_READY, cost_at, key)
  elseif when > now and not lead then
    return sleep_until(math.min(when, due_at or when))
  elseif tonumber(redis.call('HGET', K_STATS, 'releases_minute') or '-1') ~= minute then
    -- The first release of a minute: the release counts roll over first (bucket_upkeep.lua).
    return {UPKEEP, malformed}
  else
    local at_ms = math.max(when, now)
    local slot, remaining = take_head(key)
    local receives, id, at, payload, cost = parse_slot(slot)
    if not receives then
      bury(key, slot, 'malformed entry: unreadable slot', now)
      malformed = malformed + 1
      if remaining <= 0 then redis.call('ZREM', K_READY, key) end
    elseif guard and redis.call('ZSCORE', K_DONE, id) then
      -- A redelivered item whose body already completed: not applied twice, and it does not
      -- use up its key's rate.
      redis.call('HINCRBY', K_STATS, 'processed', 1)
      redis.call('HINCRBY', K_STATS, 'guard_skipped', 1)
      redis.call('HINCRBY', K_KEYSTATS, key .. '\0processed', 1)
      if remaining <= 0 then redis.call('ZREM', K_READY, key) end
    else
      local reservation, deadline = reserve(key, id, receives + 1, at, payload, remaining,
                                            timeout_ms, at_ms, cost)
      record_call(K_CALLS, K_CALLS_AT, poll_id, reservation, now)
      -- One drain job per key eligible now, up to the fan-out limit.
      local eligible = redis.call('ZCOUNT', K_READY, '-inf', now)
      if CONCURRENCY > 1 and remaining > 0 then
        -- A key with room for more calls in flight wants drain jobs for them (its own rate may
        -- make it wait a moment, which ZCOUNT does not see); this job holds one.
        local held = tonumber(redis.call('HGET', K_KEYSTATS, key .. '\0in_flight') or '0')
        eligible = eligible + math.max(CONCURRENCY - held, 0) + 1
      end
      local fan_out = claim_drain(K_DRAINS, DRAIN_LEASE_MS, max_drains, eligible)
      return {TAKEN, key, reservation, payload, receives + 1, string.format('%.17g', deadline),
              string.format('%.17g', at_ms), fan_out, cost and string.format('%.17g', cost) or '',
              string.format('%.17g', at_ms - now), malformed}
    end
  end
end
listen_for(K_LISTENING, K_SIGNAL, listener, listen, now)
return {LATER, '0', 0, malformed}
