-- Flow counters (spliced in at "--#include flow", from common.lua): what came in and went out
-- per second and per minute, read by read_flow.lua and the figures.

-- A ring slot's new value: `n` added to its old value when the slot's stamp is current, else
-- `n` alone (a stale slot restarts).
local function ring_value(old, stamp, n)
  if old then
    local old_stamp, old_value = string.match(old, '^(%d+) (%S+)$')
    if tonumber(old_stamp) == stamp then return tonumber(old_value) + n end
  end
  return n
end

-- A number as '%.17g' writes it; whole numbers (counts) take the cheaper '%d', same text.
local function number_text(value)
  if value == math.floor(value) and math.abs(value) < 1e15 then
    return string.format('%d', value)
  end
  return string.format('%.17g', value)
end

-- Add `n` to `kind`'s counters in the hash `flow`: a per-second ring of 60 slots
-- ("<kind>:<second % 60>" = "<second> <value>") for "per second over the last minute" figures,
-- and a per-minute ring of 60 slots ("<kind>:m<minute % 60>" = "<minute> <value>") for the last
-- hour's history. Bounded memory (120 fields per kind), no clean-up pass, no extra round trip;
-- both slots are read in one HMGET and written in one HSET (every producer call ticks).
local function tick(flow, kind, n, now)
  if n == 0 then return end
  local sec = math.floor(now / 1000)
  local minute = math.floor(sec / 60)
  local sec_field = kind .. ':' .. string.format('%d', sec % 60)
  local min_field = kind .. ':m' .. string.format('%d', minute % 60)
  local old = redis.call('HMGET', flow, sec_field, min_field)
  redis.call('HSET', flow,
    sec_field, string.format('%d ', sec) .. number_text(ring_value(old[1], sec, n)),
    min_field, string.format('%d ', minute) .. number_text(ring_value(old[2], minute, n)))
end
