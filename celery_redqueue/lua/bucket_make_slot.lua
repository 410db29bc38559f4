-- A slot (bucket_parse_slot.lua reads it back); `cost` and `mark` may be nil.
local function bucket_make_slot(receives, id, at, payload, cost, mark)
  local stamp = string.format('%d', at)
  if cost then stamp = stamp .. '/' .. string.format('%.17g', cost) end
  if cost and mark then stamp = stamp .. '@' .. mark end
  return receives .. ':' .. id .. ':' .. stamp .. ':' .. payload
end
