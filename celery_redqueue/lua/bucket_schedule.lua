-- When bucket keys may release items, and the drain jobs that needs (spliced in by
-- bucket_common.lua, after bucket_limits, whose K_* keys, settings and helpers it uses).

-- A key's interval (ms between releases) and burst allowance (items), or the defaults; the
-- third value is false when the key's stored rate is malformed (the defaults are used then).
local function rate_of(key)
  local spec = redis.call('HGET', K_RATES, key)
  if spec then
    local interval, burst = string.match(spec, '^(%S+) (%S+)$')
    interval, burst = tonumber(interval), tonumber(burst)
    if interval and burst and interval > 0 and burst >= 0 then return interval, burst, true end
    return DEFAULT_INTERVAL, DEFAULT_BURST, false
  end
  return DEFAULT_INTERVAL, DEFAULT_BURST, true
end

-- When a key may release its next item: its GCRA schedule allows it, and not before `earliest`
-- (scheduled_at: with the key's rate already read).
-- The theoretical arrival time survives an empty queue, so a key that empties and refills
-- keeps its place in its schedule instead of becoming "eligible now".
local function scheduled_at(key, interval, burst, earliest)
  local tat = tonumber(redis.call('HGET', K_TAT, key) or '0') or 0
  return math.max(tat - burst * interval, earliest)
end

-- With the key's other limits (bucket_limits.lua): math.huge while it is paused until resumed.
local function eligible_at(key, earliest)
  local interval, burst = rate_of(key)
  return math.max(scheduled_at(key, interval, burst, earliest), limits_at(key))
end

-- When the bucket next has work: the earliest of the first eligible key and the first due
-- delayed item (nil: none). Then plan the drain job that work needs (drain_lease.lua).
local function plan_bucket_drain(now)
  local next_at = nil
  for _, zset in ipairs({K_READY, K_SCHEDULED}) do
    local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
    if #first > 0 and (next_at == nil or tonumber(first[2]) < next_at) then
      next_at = tonumber(first[2])
    end
    -- A key eligible now settles it: the delayed set is not read then.
    if next_at ~= nil and next_at <= now then break end
  end
  return plan_drain(K_DRAINS, K_WAKE, DRAIN_LEASE_MS, now, next_at)
end

-- Arm the drain flag unless a job holds it; 1 means "send one now" (a job that then finds
-- nothing eligible yet schedules itself). For callers that cannot pass on a countdown.
local function arm_drain(now)
  return (plan_drain(K_DRAINS, K_WAKE, DRAIN_LEASE_MS, now, now))
end
