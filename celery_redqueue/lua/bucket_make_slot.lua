-- A slot (bucket_parse_slot.lua reads it back); `cost` and `window` may be nil.
local function bucket_make_slot(receives, id, at, payload, cost, window)
  local stamp = string.format('%d', at)
  if cost then stamp = stamp .. '/' .. string.format('%.17g', cost) end
  if cost and window then stamp = stamp .. '@' .. string.format('%d', window) end
  return receives .. ':' .. id .. ':' .. stamp .. ':' .. payload
end
