-- The number before the first of the next ids, when the last id taken is `last` (spliced in at
-- "--#include pool_next_ids"; pool_take_ids.lua explains the ids and takes them the same way,
-- with the same three numbers): writes nothing, so a script
-- can know its entries' ids and arrival slots before its first write.
local function pool_next_ids(last, now)
  local ID_EPOCH_MS, SLOT_MS, IDS_PER_SLOT = 1577836800000, 100, 65536
  local base = math.floor((now - ID_EPOCH_MS) / SLOT_MS) * IDS_PER_SLOT
  if last >= base then return last end
  return base
end
