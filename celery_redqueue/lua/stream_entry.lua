-- The fields of entry `id` of s.events, or nil when the cap trimmed it away.
--#include stream_fields
local function stream_entry(s, id)
  local found = redis.call('XRANGE', s.events, id, id)
  if #found == 0 then return nil end
  return stream_fields(found[1][2])
end
