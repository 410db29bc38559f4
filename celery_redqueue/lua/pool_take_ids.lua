-- Take entry ids for new calls (spliced in at "--#include pool_take_ids"); an entry's id
-- carries when it arrived, to the arrival slot:
--   id = (SLOT_MS slots since ID_EPOCH_MS) * IDS_PER_SLOT + n, written in hex before the payload,
-- so a pool needs no index entry per call to know its oldest waiting call: it counts waiting
-- entries per arrival slot (pool_arrive.lua) and an entry that leaves finds its slot from its
-- id (pool_arrival.lua, which holds the same three numbers). Within a slot the ids are one
-- HINCRBY, as plain sequence numbers were; more than IDS_PER_SLOT in one slot borrow from the
-- next (ids run a little ahead of the clock, never behind it, and stay unique and increasing:
-- FIFO policies order entries by them). Ids are numbers below 2^53, exact in Lua: always
-- written with %x / %d (Lua's default number format keeps 14 digits).

-- Take `calls` ids in one step (`stats` hash, field `seq`: the last id taken); returns the
-- number before the first, so the ids are base + 1 .. base + calls.
local function pool_take_ids(stats, calls, now)
  local ID_EPOCH_MS, SLOT_MS, IDS_PER_SLOT = 1577836800000, 100, 65536
  local last = redis.call('HINCRBY', stats, 'seq', calls)
  local base = math.floor((now - ID_EPOCH_MS) / SLOT_MS) * IDS_PER_SLOT
  if last - calls >= base then return last - calls end
  -- The first ids of a new slot.
  redis.call('HSET', stats, 'seq', string.format('%d', base + calls))
  return base
end
