-- A pop's reply (spliced in at "--#include pool_reply_entries"): `result`, its six status
-- fields, then the number k of entries, their k members, then for each entry whose count or
-- receives is not 1: its position (1..k), count, receives. `members`, `counts`, `receives`: one
-- value per entry, in reply order (counts nil: all 1).
local function pool_reply_entries(result, members, counts, receives)
  local k = #members
  result[#result + 1] = k
  local at = #result
  for i = 1, k do result[at + i] = members[i] end
  for i = 1, counts and k or 0 do
    if counts[i] ~= 1 or receives[i] ~= 1 then
      at = #result
      result[at + 1], result[at + 2], result[at + 3] = i, counts[i], receives[i]
    end
  end
  return result
end
