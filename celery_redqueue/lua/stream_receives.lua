-- How many times `id` has been handed to the group (0 when it is not pending), and its owner.
local function stream_receives(s, group, id)
  local row = redis.call('XPENDING', s.events, group, id, id, 1)[1]
  if not row then return 0, nil end
  return tonumber(row[4]), row[2]
end
