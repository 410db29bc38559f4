-- Put a key in b.ready at `when` (ZADD's flags after it, e.g. 'XX', 'GT'); every change of a
-- key's place there goes through this (or bucket_unready.lua), so b.urgent follows.
--#include bucket_sync_urgent
local function bucket_ready(b, key, when, ...)
  local args = {...}
  args[#args + 1], args[#args + 2] = when, key
  redis.call('ZADD', b.ready, unpack(args))
  bucket_sync_urgent(b, key)
end
