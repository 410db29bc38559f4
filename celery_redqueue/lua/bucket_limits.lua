-- The limits a key has beside its call rate (spliced in by bucket_common.lua and
-- bucket_enqueue_plain.lua, before bucket_schedule, which folds them into eligible_at):
-- a cost budget (units per period), a total rate over all keys, a pause, a concurrency limit.
-- ARGV[3] carries them: "concurrency" alone (0: none; 1: the ordered bucket, the same thing),
-- or "concurrency cost_interval cost_burst cost_max total_interval total_burst" (intervals in ms
-- per unit and per call, 0: no such limit; cost_max: the largest cost one period allows).
-- State: K_TAT holds, beside each key's call schedule, "key NUL cost" (its unit schedule) and
-- "NUL total" (the bucket's); K_RATES "key NUL cost" -> "interval burst max" (set_cost_rate);
-- K_PAUSED key -> until (ms; inf: until resumed). Key names never hold NUL, so no field clashes.

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

-- GCRA on units, checked before a release: a key may go once its unit schedule, less its
-- burst, has been reached. The head's cost is not read: it is paid after it goes, so one call
-- can overshoot a window by its own cost at most (see docs/metered-apis.md).
local function cost_ready_at(key)
  if COST_INTERVAL <= 0 then return 0 end
  local interval, burst = cost_rate_of(key)
  return (tonumber(redis.call('HGET', K_TAT, key .. '\0cost') or '0') or 0) - burst * interval
end

-- Charge `units` to a key's unit schedule: a release or a reported excess from the theoretical
-- schedule (max with now: idle time is not saved up beyond the burst); a refund (negative)
-- moves the schedule back.
local function charge_cost(key, units, now)
  if COST_INTERVAL <= 0 or units == 0 then return end
  local interval = cost_rate_of(key)
  local tat = tonumber(redis.call('HGET', K_TAT, key .. '\0cost') or '0') or 0
  if units > 0 then tat = math.max(tat, now) end
  redis.call('HSET', K_TAT, key .. '\0cost', string.format('%.17g', tat + units * interval))
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
