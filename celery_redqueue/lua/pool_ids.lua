-- Entry ids and arrival slots (spliced in at "--#include pool_ids", by pool_common.lua and by
-- pool_add_plain's fast path). An entry's id carries when it arrived, to the arrival slot:
--   id = (SLOT_MS slots since ID_EPOCH_MS) * IDS_PER_SLOT + n, written in hex before the payload,
-- so a pool needs no index entry per call to know its oldest waiting call: it counts waiting
-- entries per arrival slot (`arrivals`: slot -> entries) and keeps each slot's first arrival
-- in `ages` (slot -> ms; the lowest is the oldest), and an entry that leaves finds its slot
-- from its id. Within a slot the ids are one HINCRBY, as plain sequence numbers were; more
-- than IDS_PER_SLOT in one slot borrow from the next (ids run a little ahead of the clock,
-- never behind it, and stay unique and increasing: FIFO policies order entries by them). Ids
-- are numbers below 2^53, exact in Lua: always written with %x / %d (Lua's default number
-- format keeps 14 digits).
local ID_EPOCH_MS, SLOT_MS, IDS_PER_SLOT = 1577836800000, 100, 65536

-- Take `calls` ids in one step (`stats` hash, field `seq`: the last id taken); returns the
-- number before the first, so the ids are base + 1 .. base + calls.
local function take_ids(stats, calls, now)
  local last = redis.call('HINCRBY', stats, 'seq', calls)
  local base = math.floor((now - ID_EPOCH_MS) / SLOT_MS) * IDS_PER_SLOT
  if last - calls >= base then return last - calls end
  -- The first ids of a new slot.
  redis.call('HSET', stats, 'seq', string.format('%d', base + calls))
  return base
end

-- The arrival slot of the entry with numeric id `id`, and when (ms) that slot began.
local function arrival_of(id)
  local slot = math.floor(id / IDS_PER_SLOT) + ID_EPOCH_MS / SLOT_MS
  return slot * SLOT_MS, slot
end

-- `entries` entries arrived in `slot`, at `at` ms; a slot that was empty takes `at` as its age
-- (so the oldest waiting call is known to a slot).
local function arrive(ages, arrivals, slot, at, entries)
  if redis.call('HINCRBY', arrivals, slot, entries) == entries then
    redis.call('ZADD', ages, at, slot)
  end
end

-- Entries left the pool: `slots` maps slot -> entries that left it. An emptied slot leaves the
-- ages.
local function depart(ages, arrivals, slots)
  for slot, entries in pairs(slots) do
    if redis.call('HINCRBY', arrivals, slot, -entries) <= 0 then
      redis.call('HDEL', arrivals, slot)
      redis.call('ZREM', ages, slot)
    end
  end
end
