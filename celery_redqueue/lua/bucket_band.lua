-- Where b.urgent puts a key of a priority tier (bucket_sync_urgent.lua): bands are 2^46 ms apart,
-- the highest tier lowest, and ready scores stay within 2^45 of 0, so bands never overlap.
local BAND, HALF_BAND = 70368744177664, 35184372088832
local function bucket_band(tier)
  return (10 - tier) * BAND
end
