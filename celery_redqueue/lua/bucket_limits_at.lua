-- The earliest a key may release its head by its cost budget and pause: `now` (0) when its
-- head call (1 unit without a cost) fits the current cost window, else the next window's start
-- (re-checked then: a smaller allowance may make it wait one more); math.huge while it is
-- paused until resumed (b.paused: key -> until, ms or inf). The second value: by its cost alone.
--#include bucket_cost_window
--#include bucket_parse_slot
local function bucket_limits_at(b, key, now)
  local cost_at, head = 0, b.cost_interval > 0 and redis.call('HGET', b.heads, key)
  if head then
    local w, used, allowance, period = bucket_cost_window(b, key, now)
    local _, _, _, _, cost = bucket_parse_slot(redis.call('HGET', b.items, key .. '\0' .. head))
    if used + (cost or 1) > allowance then cost_at = (w + 1) * period end
  end
  local till = redis.call('ZSCORE', b.paused, key)
  return math.max(cost_at, till == 'inf' and math.huge or tonumber(till or '0') or 0), cost_at
end
