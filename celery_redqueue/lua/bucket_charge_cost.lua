-- Charge a release of `units` at `at` (ms) to its key's cost schedule: its units run from
-- max(tat, at) on, so the key's next call waits until tat - burst * interval (GCRA). In any
-- sliding window of the period a key's releases then hold at most the budget plus the burst
-- plus the cost of the window's last call. Returns the new tat as stored, the release's mark
-- (kept in its slot for a refund), or nil when the bucket meters no cost.
--#include bucket_cost_tat
local function bucket_charge_cost(b, key, units, at)
  if b.cost_interval <= 0 then return nil end
  local tat, _, interval = bucket_cost_tat(b, key)
  local mark = string.format('%.17g', math.max(tat, at) + units * interval)
  redis.call('HSET', b.tat, key .. '\0cost', mark .. ' ' .. mark)
  return mark
end
