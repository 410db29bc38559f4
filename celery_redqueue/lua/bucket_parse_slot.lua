-- What one queued item is stored as: "receives:id:at:payload", "receives:id:at/cost:payload"
-- for a call with a cost (a bucket with bucket_cost); a reserved call's slot adds "@window"
-- after its cost, the cost window it was charged in (bucket_make_slot.lua writes them).
-- Returns receives, id, at, payload, cost (nil: none) and window (nil: none); all nil when the
-- slot is malformed (only corruption makes one).
local function bucket_parse_slot(slot)
  local receives, id, at, cost, window, payload =
    string.match(slot or '', '^(%d+):(%d+):(%d+)/?([%d.]*)@?(%d*):(.*)$')
  if not receives then return nil end
  return tonumber(receives), id, tonumber(at), payload, tonumber(cost), tonumber(window)
end
