-- When a key may release its next item: its GCRA schedule (b.tat) allows it, its other limits
-- do (bucket_limits_at.lua; math.huge while paused until resumed), and not before `earliest`.
-- The theoretical arrival time survives an empty queue, so a key that empties and refills
-- keeps its place in its schedule instead of becoming "eligible now".
--#include bucket_rate
--#include bucket_limits_at
local function bucket_eligible_at(b, key, earliest, now)
  local interval, burst = bucket_rate(b, key)
  local tat = tonumber(redis.call('HGET', b.tat, key) or '0') or 0
  return math.max(tat - burst * interval, earliest, bucket_limits_at(b, key, now))
end
