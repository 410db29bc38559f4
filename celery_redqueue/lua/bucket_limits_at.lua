-- The earliest a key may release its head by its cost schedule and pause: its cost tat less the
-- burst (bucket_cost_tat.lua; 0 without a cost rate), math.huge while it is paused until
-- resumed (b.paused: key -> until, ms or inf). The second value: by its cost alone.
--#include bucket_cost_tat
local function bucket_limits_at(b, key, now)
  local cost_at = 0
  if b.cost_interval > 0 then
    local tat, _, interval, burst = bucket_cost_tat(b, key)
    cost_at = tat - burst * interval
  end
  local till = redis.call('ZSCORE', b.paused, key)
  return math.max(cost_at, till == 'inf' and math.huge or tonumber(till or '0') or 0), cost_at
end
