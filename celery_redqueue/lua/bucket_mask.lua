-- The bitmask of a key's priority tiers holding calls (b.tails "key NUL tiers"; see
-- bucket_tier_heads.lua), 0 when none or without tiers.
local function bucket_mask(b, key)
  return tonumber(redis.call('HGET', b.tails, key .. '\0tiers') or '0') or 0
end
