-- Fields of an entry as a table (XRANGE/XREADGROUP give a flat list).
local function stream_fields(flat)
  local f = {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  return f
end
