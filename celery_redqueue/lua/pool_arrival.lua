-- The arrival slot of the entry with numeric id `id`, and when (ms) that slot began (spliced in
-- at "--#include pool_arrival"; the numbers are pool_take_ids.lua's, which explains them).
local function pool_arrival(id)
  local ID_EPOCH_MS, SLOT_MS, IDS_PER_SLOT = 1577836800000, 100, 65536
  local slot = math.floor(id / IDS_PER_SLOT) + ID_EPOCH_MS / SLOT_MS
  return slot * SLOT_MS, slot
end
