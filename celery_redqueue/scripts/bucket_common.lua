-- Shared by the bucket scripts (spliced in by the loader at "--#include bucket_common").
-- Uses KEYS[2] tat and KEYS[3] rates, ARGV[1] default interval ms and ARGV[2] default burst.

-- The server clock in ms: one clock for every worker.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

-- A key's interval (ms between releases) and burst allowance (items), or the defaults.
local function rate_of(key)
  local spec = redis.call('HGET', KEYS[3], key)
  if spec then
    local interval, burst = string.match(spec, '^(%S+) (%S+)$')
    return tonumber(interval), tonumber(burst)
  end
  return tonumber(ARGV[1]), tonumber(ARGV[2])
end

-- When a key may release its next item: its GCRA schedule allows it, and not before `earliest`.
-- The theoretical arrival time survives an empty queue, so a key that empties and refills
-- keeps its place in its schedule instead of becoming "eligible now".
local function eligible_at(key, earliest)
  local interval, burst = rate_of(key)
  return math.max(tonumber(redis.call('HGET', KEYS[2], key) or '0') - burst * interval, earliest)
end
