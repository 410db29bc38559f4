-- The id of a pool member (spliced in at "--#include pool_id"): its text, and its number when
-- not coalescing. Coalescing members are their payload; others carry a unique hex id
-- (pool_take_ids.lua) and ':' before it. Nil when the member is malformed (only corruption makes
-- one). A plain find, not a pattern: this runs for every popped entry.
local function pool_id(member, coalesce)
  if coalesce then return member end
  local colon = string.find(member, ':', 1, true)
  if not colon or colon == 1 then return nil end
  local id = string.sub(member, 1, colon - 1)
  local n = tonumber(id, 16)
  if not n then return nil end
  return id, n
end
