-- The name of a key's sub-queue of a priority tier in b.heads and b.tails: the key itself for
-- tier 0 (every bucket's one queue), "key NUL tier" above (bucket_tier_heads.lua).
local function bucket_queue(key, tier)
  if tier and tier > 0 then return key .. '\0' .. tier end
  return key
end
