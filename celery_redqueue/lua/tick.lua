-- Flow counters (spliced in at "--#include tick"): what came in and went out per second and
-- per minute, read by read_flow.lua and the figures (figures.py's _slots).
-- A tick is one HINCRBY of the field named by its absolute second, "<kind>:<second>": every
-- producer call ticks, so nothing is read first (a ring of "stamp value" slots, ticked per
-- second and per minute, cost three times as much, measured). Once a minute (the first tick
-- of a kind in a second finds the field "rolled" older than this minute), the seconds of
-- minutes that ended over a minute ago are rolled into per-minute fields, "<kind>:m<minute>",
-- and minutes older than an hour are dropped: the hash stays bounded (about 120 second
-- fields and 61 minute fields per kind). A minute's count is its minute field plus its second
-- fields not rolled yet: the reader adds both.

-- Add `n` (a count, or busy seconds with a fraction) to `kind`'s field of this second in the
-- hash `flow`.
--#include roll_flow
local function tick(flow, kind, n, now)
  if n == 0 then return end
  local sec = math.floor(now / 1000)
  local field = kind .. ':' .. sec
  local value
  -- Never fails (it would fail the caller's script half-way): HINCRBY refuses a fraction (a
  -- whole 'busy' tick after a fractional one; an error reply is a table), and a field holding
  -- garbage (HINCRBYFLOAT refuses it too) is a figure lost, reset to n.
  if n == math.floor(n) then value = redis.pcall('HINCRBY', flow, field, n) end
  if type(value) ~= 'number' then value = redis.pcall('HINCRBYFLOAT', flow, field, n) end
  -- A flow key of another type (a corruption, HSET refuses it too) loses the figure.
  if type(value) == 'table' then value = type(redis.pcall('HSET', flow, field, n)) == 'number' and n or nil end
  -- The field holds exactly n only after the kind's first tick in this second. Rolling reads
  -- the whole hash, so it runs once a minute (the field "rolled" says when it last ran), not
  -- on every kind's first tick of every second.
  local minute = math.floor(sec / 60)
  if tonumber(value) == n and tonumber(redis.call('HGET', flow, 'rolled')) ~= minute then
    redis.call('HSET', flow, 'rolled', minute)
    roll_flow(flow, minute - 1)
  end
end
