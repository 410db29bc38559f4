-- Costs are metered per aligned window of the cost rate's period (1 s for "/s", the minute for
-- "/m", from the server's epoch): a key releases its head only while the units charged in the
-- current window plus the head's cost fit the window's allowance, its budget plus what the
-- previous window left unused (at most the burst). So a window never holds more than its
-- allowance: exact, where GCRA could overshoot by a call's cost and a late refund could free
-- units in a later window. b.tat "key NUL cost" holds "window used allowance".
-- Returns the window at `now`, the units used in it, its allowance and the period (ms).
--#include bucket_cost_rate
local function bucket_cost_window(b, key, now)
  local interval, burst, most = bucket_cost_rate(b, key)
  local budget = most - burst
  local period = math.max(math.floor(interval * budget + 0.5), 1)
  local w = math.floor(now / period)
  local sw, used, allowance =
    string.match(redis.call('HGET', b.tat, key .. '\0cost') or '', '^(%S+) (%S+) (%S+)$')
  sw, used, allowance = tonumber(sw), tonumber(used), tonumber(allowance)
  if not (used and allowance) or (sw ~= w and sw ~= w - 1) then return w, 0, budget + burst, period end
  if sw == w then return w, used, allowance, period end
  -- The previous window's unused units carry over, at most the burst.
  return w, 0, budget + math.min(math.max(allowance - used, 0), burst), period
end
