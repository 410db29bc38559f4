-- How many items a key's queue holds (b.heads and b.tails: its first and next positions; on a
-- bucket with priority tiers, over all its tiers).
--#include bucket_tier_heads
local function bucket_depth(b, key)
  if b.priority_bound > 0 then return select(2, bucket_tier_heads(b, key)) end
  return tonumber(redis.call('HGET', b.tails, key) or '0') - tonumber(redis.call('HGET', b.heads, key) or '0')
end
