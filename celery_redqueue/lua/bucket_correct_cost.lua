-- Correct a key's cost schedule by `delta` units at a call's settle (reported - charged). An
-- excess moves it on at once (the units were spent). A refund moves it back only while the call
-- is still the key's latest release (its slot's `mark` is the schedule's): once a later call
-- went, every window starting after this call holds its budget already, and units given back
-- there would let it exceed it. The mark stays, so a second correction sees the same call.
--#include bucket_cost_tat
local function bucket_correct_cost(b, key, delta, mark)
  if b.cost_interval <= 0 or delta == 0 then return end
  local tat, latest, interval = bucket_cost_tat(b, key)
  if delta < 0 and (mark == nil or mark ~= latest) then return end
  redis.call('HSET', b.tat, key .. '\0cost', string.format('%.17g', tat + delta * interval) .. ' ' .. latest)
end
