-- Entries left the pool (spliced in at "--#include pool_depart"): `slots` maps arrival slot ->
-- entries that left it; a slot emptied leaves `arrivals` and `ages` (see pool_arrive.lua).
local function pool_depart(ages, arrivals, slots)
  for slot, entries in pairs(slots) do
    if redis.call('HINCRBY', arrivals, slot, -entries) <= 0 then
      redis.call('HDEL', arrivals, slot)
      redis.call('ZREM', ages, slot)
    end
  end
end
