-- Entry ids and arrival slots (spliced in at "--#include pool_ids", by pool_common.lua and by
-- pool_add_plain's fast path). An entry's id carries when it arrived:
--   id = (ms since ID_EPOCH_MS) * IDS_PER_MS + n, written in hex before the payload,
-- so a pool needs no index entry per call to know its oldest waiting call: it counts waiting
-- entries per arrival slot (`arrivals`: slot -> entries) and keeps each slot's first arrival
-- in `ages` (slot -> ms; the lowest is the oldest), and an entry that leaves finds its slot
-- from its id. More than IDS_PER_MS ids in one ms borrow from the next ms: ids run a little
-- ahead of the clock, never behind it, and stay unique and increasing (FIFO policies order
-- entries by them). Ids are numbers up to 2^53, exact in Lua: always written with %x / %d
-- (Lua's default number format keeps 14 digits).
local ID_EPOCH_MS, IDS_PER_MS, SLOT_MS = 1577836800000, 1024, 100

-- Take `calls` ids in one step (`stats` hash, field `seq`: the last id taken); returns the
-- number before the first, so the ids are base + 1 .. base + calls.
local function take_ids(stats, calls, now)
  local last = tonumber(redis.call('HGET', stats, 'seq') or '0') or 0
  local base = math.max(last, math.floor(now - ID_EPOCH_MS) * IDS_PER_MS)
  redis.call('HSET', stats, 'seq', string.format('%d', base + calls))
  return base
end

-- When (ms) the entry with numeric id `id` arrived, and its arrival slot.
local function arrival_of(id)
  local at = ID_EPOCH_MS + math.floor(id / IDS_PER_MS)
  return at, math.floor(at / SLOT_MS)
end

-- `entries` entries arrived in `slot`, the first of them at `at` ms (a slot's age is the
-- earliest arrival it has held since it was last empty).
local function arrive(ages, arrivals, slot, at, entries)
  redis.call('HINCRBY', arrivals, slot, entries)
  redis.call('ZADD', ages, 'LT', at, slot)
end

-- Entries left the pool: `slots` maps slot -> entries that left it. An emptied slot leaves the
-- ages (a count that went below zero can only be a slot of ids from before slots: dropped).
local function depart(ages, arrivals, slots)
  for slot, entries in pairs(slots) do
    if redis.call('HINCRBY', arrivals, slot, -entries) <= 0 then
      redis.call('HDEL', arrivals, slot)
      redis.call('ZREM', ages, slot)
    end
  end
end
