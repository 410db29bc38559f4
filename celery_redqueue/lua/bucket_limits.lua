-- The limits a key has beside its call rate (spliced in by bucket_common.lua and
-- bucket_enqueue_plain.lua, before bucket_schedule, which folds them into eligible_at):
-- a cost budget (units per period), a total rate over all keys, a pause, a concurrency limit.
-- ARGV[3] carries them: "concurrency" alone (0: none; 1: the ordered bucket, the same thing),
-- or "concurrency cost_interval cost_burst cost_max total_interval total_burst" (intervals in ms
-- per unit and per call, 0: no such limit; cost_max: the largest cost one period allows).
-- State: K_TAT holds, beside each key's call schedule, "key NUL cost" (its cost window) and
-- "NUL total" (the bucket's); K_RATES "key NUL cost" -> "interval burst max" (set_cost_rate);
-- K_PAUSED key -> until (ms; inf: until resumed). Key names never hold NUL, so no field clashes.
--#include clock
--#include bucket_slot

local function parse_limits(spec)
  local v = {}
  for part in string.gmatch(spec or '', '%S+') do v[#v + 1] = tonumber(part) or 0 end
  return v[1] or 0, v[2] or 0, v[3] or 0, v[4] or 0, v[5] or 0, v[6] or 0
end

local CONCURRENCY, COST_INTERVAL, COST_BURST, COST_MAX, TOTAL_INTERVAL, TOTAL_BURST =
  parse_limits(ARGV[3])

-- A key's cost interval (ms per unit), burst (units) and largest cost, or the bucket's.
local function cost_rate_of(key)
  local spec = redis.call('HGET', K_RATES, key .. '\0cost')
  if spec then
    local i, b, m = string.match(spec, '^(%S+) (%S+) (%S+)$')
    i, b, m = tonumber(i), tonumber(b), tonumber(m)
    if i and b and m and i > 0 and b >= 0 and m > 0 then return i, b, m end
  end
  return COST_INTERVAL, COST_BURST, COST_MAX
end

-- Costs are metered per aligned window of the cost rate's period (1 s for "/s", the minute
-- for "/m", from the server's epoch): a key releases its head only while the units charged in
-- the current window plus the head's cost fit the window's allowance, its budget plus what the
-- previous window left unused (at most the burst). So a window never holds more than its
-- allowance: exact, where GCRA could overshoot by a call's cost and a late refund could free
-- units in a later window. K_TAT "key NUL cost" holds "window used allowance".
local function cost_window(key, now)
  local interval, burst, most = cost_rate_of(key)
  local budget = most - burst
  local period = math.max(math.floor(interval * budget + 0.5), 1)
  local w = math.floor(now / period)
  local state = redis.call('HGET', K_TAT, key .. '\0cost') or ''
  local sw, used, allowance = string.match(state, '^(%S+) (%S+) (%S+)$')
  sw, used, allowance = tonumber(sw), tonumber(used), tonumber(allowance)
  if sw == w and used and allowance then return w, used, allowance, period end
  local left = burst
  if sw == w - 1 and used and allowance then left = math.min(math.max(allowance - used, 0), burst) end
  return w, 0, budget + left, period
end

-- The cost a key's head call is charged (1 unit when it has none; 0 when the key is empty).
local function head_cost(key)
  local head = redis.call('HGET', K_HEADS, key)
  if not head then return 0 end
  local _, _, _, _, cost = parse_slot(redis.call('HGET', K_ITEMS, key .. '\0' .. head))
  return cost or 1
end

-- When a key's head may go by its cost budget: now (0) when it fits the current window, else
-- the next window's start (re-checked then: a smaller allowance may make it wait one more).
local function cost_ready_at(key)
  if COST_INTERVAL <= 0 then return 0 end
  local w, used, allowance, period = cost_window(key, now_ms())
  if used + head_cost(key) <= allowance then return 0 end
  return (w + 1) * period
end

-- Charge `units` to the current window (a release, or a reported excess: the units were spent,
-- whenever the call went). A refund (negative) counts only in the call's own window
-- (`window`): that window's units were charged, a later window's were not. Returns the window.
local function charge_cost(key, units, now, window)
  if COST_INTERVAL <= 0 then return nil end
  local w, used, allowance = cost_window(key, now)
  if units < 0 and window ~= w then return w end
  used = math.max(used + units, 0)
  redis.call('HSET', K_TAT, key .. '\0cost', w .. ' ' .. string.format('%.17g', used) .. ' ' ..
             string.format('%.17g', allowance))
  return w
end

-- When the bucket's total rate next allows a release (0: no total rate).
local function total_ready_at()
  if TOTAL_INTERVAL <= 0 then return 0 end
  local tat = tonumber(redis.call('HGET', K_TAT, '\0total') or '0') or 0
  return tat - TOTAL_BURST * TOTAL_INTERVAL
end

local function charge_total(now)
  if TOTAL_INTERVAL <= 0 then return end
  local tat = tonumber(redis.call('HGET', K_TAT, '\0total') or '0') or 0
  redis.call('HSET', K_TAT, '\0total', string.format('%.17g', math.max(tat, now) + TOTAL_INTERVAL))
end

-- Until when a key is paused: ms, math.huge until resumed, 0 when it is not.
local function paused_until(key)
  local till = redis.call('ZSCORE', K_PAUSED, key)
  if not till then return 0 end
  if till == 'inf' then return math.huge end
  return tonumber(till) or 0
end

-- The earliest a key may go by its cost budget and pause (math.huge: paused until resumed).
local function limits_at(key)
  return math.max(cost_ready_at(key), paused_until(key))
end

-- The key has as many calls in flight as it may (reservations count, whoever holds them).
local function at_capacity(key)
  if CONCURRENCY <= 0 then return false end
  return tonumber(redis.call('HGET', K_KEYSTATS, key .. '\0in_flight') or '0') >= CONCURRENCY
end
