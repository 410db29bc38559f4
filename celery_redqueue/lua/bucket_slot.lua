-- What one queued item is stored as, "receives:id:at:payload", or "receives:id:at/cost:payload"
-- for a call with a cost (a bucket with bucket_cost) (spliced in by bucket_limits.lua). A
-- reserved call's slot adds "@window" after its cost: the cost window it was charged in.

-- A slot's parts, its cost (nil: none given) and cost window (nil: none) last; all nil when
-- it is malformed (only corruption makes one).
local function parse_slot(slot)
  local receives, id, at, cost, window, payload =
    string.match(slot or '', '^(%d+):(%d+):(%d+)/?([%d.]*)@?(%d*):(.*)$')
  if not receives then return nil, nil, nil, nil, nil, nil end
  return tonumber(receives), id, tonumber(at), payload, tonumber(cost), tonumber(window)
end

local function make_slot(receives, id, at, payload, cost, window)
  local stamp = string.format('%d', at)
  if cost then stamp = stamp .. '/' .. string.format('%.17g', cost) end
  if cost and window then stamp = stamp .. '@' .. string.format('%d', window) end
  return receives .. ':' .. id .. ':' .. stamp .. ':' .. payload
end
