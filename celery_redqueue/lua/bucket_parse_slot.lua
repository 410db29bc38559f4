-- What one queued item is stored as: "receives:id:at:payload", "receives:id:at/cost:payload"
-- for a call with a cost (a bucket with bucket_cost); a reserved call's slot adds "@mark" after
-- its cost, the cost schedule its release left (bucket_charge_cost.lua), as stored; a call of a
-- priority tier above 0 ends the stamp with "^tier" (bucket_tier_heads.lua).
-- Returns receives, id, at, payload, cost (nil: none), mark (a string; nil: none) and tier (0
-- when none); all nil when the slot is malformed (only corruption makes one).
local function bucket_parse_slot(slot)
  local receives, id, at, cost, mark, tier, payload =
    string.match(slot or '', '^(%d+):(%d+):(%d+)/?([%d.eE+%-]*)@?([%d.eE+%-]*)%^?(%d?):(.*)$')
  if not receives then return nil end
  return tonumber(receives), id, tonumber(at), payload, tonumber(cost), mark ~= '' and mark or nil, tonumber(tier) or 0
end
