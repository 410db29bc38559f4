-- A key's cost schedule, GCRA like its call rate: b.tat "key NUL cost" holds "tat mark", the
-- theoretical arrival time (ms) of the key's next unit and the tat its latest release left
-- (bucket_charge_cost.lua; a refund applies only while that release is the latest). A key may
-- release its head call when now >= tat - burst * interval, whatever the head costs; the call
-- then moves tat on by its cost. Returns tat (0: none yet), mark ('': none), the key's cost
-- interval (ms per unit) and burst (units). Anything unreadable reads as "no schedule yet".
--#include bucket_cost_rate
local function bucket_cost_tat(b, key)
  local interval, burst = bucket_cost_rate(b, key)
  local tat, mark = string.match(redis.call('HGET', b.tat, key .. '\0cost') or '', '^(%S+) (%S+)$')
  return tonumber(tat) or 0, tonumber(tat) and mark or '', interval, burst
end
