-- Mark a key's priority tier as holding calls or not (its bitmask: bucket_mask.lua).
--#include bucket_mask
local function bucket_set_tier(b, key, tier, holds)
  local mask, flag = bucket_mask(b, key), bit.lshift(1, tier)
  local new = holds and bit.bor(mask, flag) or bit.band(mask, bit.bnot(flag))
  if new == 0 then redis.call('HDEL', b.tails, key .. '\0tiers') elseif new ~= mask then redis.call('HSET', b.tails, key .. '\0tiers', new) end
end
