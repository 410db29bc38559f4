-- What one queued item is stored as, "receives:id:at:payload", or "receives:id:at/cost:payload"
-- for a call with a cost (a bucket with bucket_cost) (spliced in by bucket_queue.lua and
-- bucket_enqueue_plain.lua).

-- A slot's parts, its cost last (nil: none given); all nil when it is malformed (only
-- corruption makes one).
local function parse_slot(slot)
  local receives, id, at, cost, payload = string.match(slot or '', '^(%d+):(%d+):(%d+)/?([%d.]*):(.*)$')
  if not receives then return nil, nil, nil, nil, nil end
  return tonumber(receives), id, tonumber(at), payload, tonumber(cost)
end

local function make_slot(receives, id, at, payload, cost)
  local stamp = string.format('%d', at)
  if cost then stamp = stamp .. '/' .. string.format('%.17g', cost) end
  return receives .. ':' .. id .. ':' .. stamp .. ':' .. payload
end
