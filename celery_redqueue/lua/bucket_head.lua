-- A key's head item: its position (b.heads) and slot (b.items; nil when missing).
local function bucket_head(b, key)
  local head = tonumber(redis.call('HGET', b.heads, key) or '0') or 0
  return head, redis.call('HGET', b.items, key .. '\0' .. head) or nil
end
