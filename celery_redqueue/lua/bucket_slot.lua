-- What one queued item is stored as, "receives:id:at:payload" (spliced in by bucket_queue.lua
-- and bucket_enqueue_plain.lua).

-- A slot's parts; all nil when it is malformed (only corruption makes one).
local function parse_slot(slot)
  local receives, id, at, payload = string.match(slot or '', '^(%d+):(%d+):(%d+):(.*)$')
  if not receives then return nil, nil, nil, nil end
  return tonumber(receives), id, tonumber(at), payload
end

local function make_slot(receives, id, at, payload)
  return receives .. ':' .. id .. ':' .. string.format('%d', at) .. ':' .. payload
end
