-- A slot (bucket_parse_slot.lua reads it back); `cost`, `mark` and `tier` may be nil (tier 0).
local function bucket_make_slot(receives, id, at, payload, cost, mark, tier)
  local stamp = string.format('%d', at)
  if cost then stamp = stamp .. '/' .. string.format('%.17g', cost) end
  if cost and mark then stamp = stamp .. '@' .. mark end
  if tier and tier > 0 then stamp = stamp .. '^' .. tier end
  return receives .. ':' .. id .. ':' .. stamp .. ':' .. payload
end
