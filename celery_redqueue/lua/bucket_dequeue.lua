-- Release the head item of the key that has been eligible longest, and reserve it.
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] reservation timeout ms, ARGV[9] most drain jobs at once (fan-out limit),
-- ARGV[10] processed-guard (1|0): skip items whose id completed already,
-- ARGV[11] poll id (unique, chosen by the caller): the reservation is recorded under it,
-- ARGV[12] listen ms, ARGV[13] listener id, ARGV[14] linger (1|0): a poll that releases nothing
-- lists the listener on the wake signal for that long (LATER with something due within it;
-- EMPTY only when lingering), else takes it off (wake_listener.lua).
-- ARGV[15] ahead ms (0: off): a key due within it is released now at its slot (its schedules
-- advance from the slot, not from a later wake-up); the caller waits out the lead before the
-- body runs, without a wake-up round trip.
-- Reply: a status first (take_status.lua):
--   {UPKEEP, key}                     delayed items came due, the head of `key` (absent: none)
--                                     is unreadable or completed already (processed guard), or
--                                     a release would begin a new minute: run bucket_upkeep.lua,
--                                     then poll again (nothing was reserved)
--   {EMPTY}                           nothing queued or due (the drain flag was cleared here)
--   {LATER, wait_ms, schedule}       items queued or delayed, none may go for wait_ms
--                                     more; the flag was released, and schedule = 1 asks the
--                                     caller for a drain job with that countdown
--   {TAKEN, key, reservation id, payload, receives, deadline ms, released ms, fan_out, cost,
--    lead ms}                       cost: the call's units ('' when it has none); lead: how
--                                   long after now it was released at (ahead), else 0
-- Times go back as "%.17g" strings: tostring() keeps 14 digits, which rounds ms timestamps
-- to 0.1 ms and would let a fast key with a burst drift above its rate. Bounded: O(log K)
-- (plus at most 100 keys whose cost schedule moved on).
-- Lost reply: safe to run twice: a poll whose id recorded a reservation still held replies that
-- reservation again (no fan-out) and takes nothing.
--#include bucket_keys
--#include clock
--#include claim_drain
--#include plan_drain
--#include take_status
--#include record_call
--#include recorded
--#include listen_for
--#include bucket_parse_slot
--#include bucket_eligible_at
--#include bucket_head
--#include bucket_take_head
--#include bucket_reserve
--#include bucket_concurrency
--#include bucket_ready
--#include bucket_unready
--#include bucket_next_key
local b = bucket_keys(KEYS, ARGV)
local timeout_ms, max_drains, guard = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10] == '1'
local poll_id, listen = 'poll:' .. ARGV[11], tonumber(ARGV[12]) or 0
local listener, linger, ahead = ARGV[13] or '', ARGV[14] == '1', tonumber(ARGV[15]) or 0
local now = now_ms()
-- Before its first read (as check_keys.lua checks, in fewer lines): a key of another type than
-- bucket_keys.lua names, or a counter it reads or adds to that is not an integer (a stats
-- field; the key it releases from: its head, tail and in_flight), fails it with CORRUPT.
-- Only the keys it touches ('-': not touched; tests/unit/test_lua_shape.py checks the masks).
local TYPES = {z = 'zset', h = 'hash', l = 'list', s = 'string'} for i = 1, 28 do local want = TYPES[string.sub('zhhhhhzhhhh-sszz-z-zz-hzlz-z', i, i)] local kind = want and redis.call('TYPE', KEYS[i]).ok if kind and kind ~= want and kind ~= 'none' then error('CORRUPT ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a ' .. want, 0) end end
local function integer(h, f) local v = redis.call('HGET', h, f) if v and not string.match(v, '^%-?%d+$') then error('CORRUPT ' .. h .. ' field ' .. f .. ' holds ' .. v .. ', not an integer', 0) end end
local stats = redis.call('HGETALL', b.stats) for i = 2, #stats, 2 do if not string.match(stats[i], '^%-?%d+$') then error('CORRUPT ' .. b.stats .. ' field ' .. stats[i - 1] .. ' holds ' .. stats[i] .. ', not an integer', 0) end end

local function fmt_ms(ms) return string.format('%.17g', ms) end
local function reply_taken(key, reservation, payload, receives, deadline, at_ms, fan_out, cost)
  return {TAKEN, key, reservation, payload, receives, fmt_ms(deadline), fmt_ms(at_ms), fan_out, cost and fmt_ms(cost) or '', fmt_ms(math.max(at_ms - now, 0))}
end

local held = recorded(b.calls, poll_id)
local held_key = held and redis.call('HGET', b.res_keys, held)
if held_key then
  -- A re-sent poll: its first run's reply was lost. The same reservation again, released at
  -- the same slot (its deadline less the timeout: nothing renews a reservation its drain has
  -- not seen), so a call reserved ahead still waits out what is left of its lead.
  local receives, _, _, payload, cost = bucket_parse_slot(redis.call('HGET', b.res_items, held))
  local deadline = tonumber(redis.call('ZSCORE', b.inflight, held) or '') or now + timeout_ms
  return reply_taken(held_key, held, payload, receives, deadline, deadline - timeout_ms, 0, cost)
end
-- Due delayed items join their keys' queues first (bucket_upkeep.lua, a rare step).
local first_due = redis.call('ZRANGE', b.scheduled, 0, 0, 'WITHSCORES')
local due_at = #first_due > 0 and tonumber(first_due[2]) or nil
if due_at and due_at <= now then return {UPKEEP} end
local minute = math.floor(now / 60000)

-- Nothing may go before `when`: release the flag (so an item due sooner sends its own job)
-- and have one drain job scheduled for `when` unless one is scheduled no later.
-- Reserving ahead, the caller is told to come back `ahead` early, to find it within reach;
-- so is the drain job (the wake key then vanishes when that job comes, not after: a job that
-- found the key of its own wake-up would think another job was coming).
local function sleep_until(when)
  listen_for(b.listening, b.signal, listener, when - now <= listen and listen or 0, now)
  if when - ahead > now then when = when - ahead end
  redis.call('DEL', b.drains)
  local _, wait = plan_drain(b.drains, b.wake, b.lease, now, when)
  return {LATER, fmt_ms(when - now), wait >= 0 and 1 or 0}
end

for _ = 1, 100 do
  local top = bucket_next_key(b, now)
  if #top == 0 then
    if due_at then return sleep_until(due_at) end
    -- Nothing is eligible until a new item, a commit (ordered keys) or the reaper adds a key;
    -- the drain flag is cleared in this same step so that the next enqueue sends a job.
    redis.call('DEL', b.drains, b.wake)
    listen_for(b.listening, b.signal, listener, linger and listen or 0, now)
    return {EMPTY}
  end
  local key, when = top[1], tonumber(top[2])
  integer(b.heads, key) integer(b.tails, key) integer(b.keystats, key .. '\0in_flight')
  -- Under a total rate the key eligible longest still goes first, when the total allows.
  if b.total_interval > 0 then
    local total = tonumber(redis.call('HGET', b.tat, '\0total') or '0') or 0
    when = math.max(when, total - b.total_burst * b.total_interval)
  end
  -- The key's schedules must allow it; its ready time may predate a correction (a reported
  -- excess, a call the reaper put back at the head of a key eligible already), or be the place
  -- a weighted key kept for its turn (bucket_turn.lua).
  local due = bucket_eligible_at(b, key, 0, now)
  -- Released ahead, a call is charged from its slot on, as if released then.
  local lead = when > now and when <= now + ahead and (due_at == nil or due_at >= when)
  local head, slot, tier = bucket_head(b, key, now)
  if tier > 0 then integer(b.heads, key .. '\0' .. tier) integer(b.tails, key .. '\0' .. tier) integer(b.tails, key .. '\0tiers') end
  local receives, id, at, payload, cost = bucket_parse_slot(slot)
  if due > math.max(when, now) then  -- math.huge: paused until resumed
    if due < math.huge then bucket_ready(b, key, due) else bucket_unready(b, key) end
  elseif when > now and not lead then
    return sleep_until(math.min(when, due_at or when))
  elseif not receives or (guard and redis.call('ZSCORE', b.done, id)) or tonumber(redis.call('HGET', b.stats, 'releases_minute') or '-1') ~= minute then
    -- An unreadable head, one whose body completed already (processed guard), or the first
    -- release of a minute: bucket_upkeep.lua deals with it first.
    return {UPKEEP, key}
  else
    local at_ms = math.max(when, now)
    local remaining = bucket_take_head(b, key, head, tier)
    local reservation, deadline = bucket_reserve(b, key, id, receives + 1, at, payload, cost, remaining, timeout_ms, at_ms, now, tier)
    record_call(b.calls, b.calls_at, poll_id, reservation, now)
    -- One drain job per key eligible now, up to the fan-out limit. A key with room for more
    -- calls in flight wants a drain job for each of its calls in flight (this one included:
    -- each job runs one body) and for each free slot its waiting calls can fill (its own rate
    -- may make it wait a moment, which ZCOUNT does not see).
    local limit = bucket_concurrency(b, key)
    local in_flight = limit > 1 and remaining > 0 and tonumber(redis.call('HGET', b.keystats, key .. '\0in_flight') or '0')
    local eligible = redis.call('ZCOUNT', b.ready, '-inf', now) + (in_flight and in_flight + math.min(math.max(limit - in_flight, 0), remaining) or 0)
    local fan_out = claim_drain(b.drains, b.lease, max_drains, eligible)
    return reply_taken(key, reservation, payload, receives + 1, deadline, at_ms, fan_out, cost)
  end
end
listen_for(b.listening, b.signal, listener, listen, now)
return {LATER, '0', 0}
