-- Run `cmd key ...` over `list` in chunks of 1000 (unpack has a stack limit); the replies,
-- joined (spliced in at "--#include over_chunks").
local function over_chunks(cmd, key, list)
  local out = {}
  for from = 1, #list, 1000 do
    local part = redis.call(cmd, key, unpack(list, from, math.min(from + 999, #list)))
    if type(part) == 'table' then
      for j = 1, #part do out[from + j - 1] = part[j] end
    end
  end
  return out
end
