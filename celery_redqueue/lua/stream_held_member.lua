-- The member of s.held for entry `id` of partition `key`: stream ids compare as numbers
-- "ms-seq"; zero-padded they also compare as strings, so a key's held entries sort in order.
local function stream_held_member(key, id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return key .. '\n' .. string.rep('0', 20 - #ms) .. ms .. '-' .. string.rep('0', 20 - #seq) .. seq
end
