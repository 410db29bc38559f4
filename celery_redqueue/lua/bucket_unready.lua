-- Take a key out of b.ready (and b.urgent: bucket_ready.lua).
local function bucket_unready(b, key)
  redis.call('ZREM', b.ready, key)
  if b.priority_bound > 0 then redis.call('ZREM', b.urgent, key) end
end
