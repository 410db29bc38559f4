-- Charge `units` to a key's current cost window (a release, or a reported excess: the units
-- were spent, whenever the call went). A refund (negative) counts only in the call's own window
-- (`window`): that window's units were charged, a later window's were not. Returns the window
-- (nil: the bucket meters no cost).
--#include bucket_cost_window
local function bucket_charge_cost(b, key, units, now, window)
  if b.cost_interval <= 0 then return nil end
  local w, used, allowance = bucket_cost_window(b, key, now)
  if units < 0 and window ~= w then return w end
  used = math.max(used + units, 0)
  redis.call('HSET', b.tat, key .. '\0cost',
             w .. ' ' .. string.format('%.17g', used) .. ' ' .. string.format('%.17g', allowance))
  return w
end
