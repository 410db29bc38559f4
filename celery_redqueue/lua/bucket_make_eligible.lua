-- Make a key eligible (b.ready) if it has items, is not already, has room for another call in
-- flight (an ordered key has none while one is) and is not paused until resumed.
-- `depth`: the key's depth when the caller knows it (nil: read it). Returns when it became
-- eligible, or nil.
--#include bucket_depth
--#include bucket_at_capacity
--#include bucket_eligible_at
--#include bucket_ready
local function bucket_make_eligible(b, key, now, depth)
  if redis.call('ZSCORE', b.ready, key) or (depth or bucket_depth(b, key)) <= 0 then return nil end
  if bucket_at_capacity(b, key) then return nil end
  local when = bucket_eligible_at(b, key, now, now)
  if when == math.huge then return nil end
  bucket_ready(b, key, when)
  return when
end
