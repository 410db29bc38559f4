-- Flow counters (spliced in at "--#include flow", from common.lua): what came in and went out
-- per second and per minute, read by read_flow.lua and the figures.

-- Add `n` to `kind`'s counters in the hash `flow`: a per-second ring of 60 slots
-- ("<kind>:<second % 60>" = "<second> <value>") for "per second over the last minute" figures,
-- and a per-minute ring of 60 slots ("<kind>:m<minute % 60>" = "<minute> <value>") for the last
-- hour's history. A slot whose stamp is not the current second (minute) is stale and restarts
-- from `n`: bounded memory (120 fields per kind), no clean-up pass, no extra round trip.
local function ring_add(flow, field, stamp, n)
  local old = redis.call('HGET', flow, field)
  local value = n
  if old then
    local old_stamp, old_value = string.match(old, '^(%d+) (%S+)$')
    if tonumber(old_stamp) == stamp then value = tonumber(old_value) + n end
  end
  redis.call('HSET', flow, field, stamp .. ' ' .. string.format('%.17g', value))
end

local function tick(flow, kind, n, now)
  if n == 0 then return end
  local sec = math.floor(now / 1000)
  local minute = math.floor(sec / 60)
  ring_add(flow, kind .. ':' .. (sec % 60), sec, n)
  ring_add(flow, kind .. ':m' .. (minute % 60), minute, n)
end
