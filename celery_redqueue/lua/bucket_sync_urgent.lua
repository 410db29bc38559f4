-- b.urgent follows a key's ready score and its highest priority tier (bucket_tier_heads.lua):
-- a key in b.ready whose highest tier is above 0 is in it, at that tier's band + its score.
--#include bucket_mask
--#include bucket_band
local function bucket_sync_urgent(b, key)
  if b.priority_bound <= 0 then return end
  local score, mask, top = redis.call('ZSCORE', b.ready, key), bucket_mask(b, key), 0
  for tier = 9, 1, -1 do if top == 0 and bit.band(mask, bit.lshift(1, tier)) ~= 0 then top = tier end end
  if score and top > 0 then redis.call('ZADD', b.urgent, bucket_band(top) + tonumber(score), key) else redis.call('ZREM', b.urgent, key) end
end
