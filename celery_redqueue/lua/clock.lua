-- The Redis server's clock (spliced in at "--#include clock"): one clock for every worker,
-- client and structure, whatever their own clocks say.

-- Milliseconds since the epoch, with microseconds as the fraction.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
