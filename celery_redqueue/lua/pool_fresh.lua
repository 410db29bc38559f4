-- The common pop's entries (spliced in at "--#include pool_fresh"): fresh (no receive count kept
-- anywhere, not coalescing, no guard), so every one is delivered, one call each. `range` is a
-- ZRANGE reply, its members `step` apart (2: with scores). The members in order and the entries
-- per arrival slot, or nil when one is malformed (pool_pop_mixed then sorts them out).
--#include pool_arrival
local function pool_fresh(range, step)
  local members, slots, k = {}, {}, 0
  for i = 1, #range, step do
    local member = range[i]
    local n = tonumber(string.match(member, '^(%x+):') or '', 16)
    if not n then return nil end
    k = k + 1
    members[k] = member
    local _, slot = pool_arrival(n)
    slots[slot] = (slots[slot] or 0) + 1
  end
  return members, slots
end
