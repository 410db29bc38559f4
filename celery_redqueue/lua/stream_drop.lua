-- A pending entry that is no longer to be handed out: acknowledge it and free its key.
--#include stream_release_key
local function stream_drop(s, r, id)
  redis.call('XACK', s.events, r.group, id)
  if r.ordered then stream_release_key(s, id) end
end
