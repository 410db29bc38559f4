-- Append a dead letter (b.dead: "json NL payload") with its key, id, receives and the text of
-- its last failure (a malformed slot is kept whole as the payload).
--#include bucket_parse_slot
local function bucket_bury(b, key, slot, err, now)
  local receives, id, at, payload, cost = bucket_parse_slot(slot)
  if not receives then receives, id, at, payload = 0, nil, now, slot or '' end
  local info = cjson.encode({key = key, id = tonumber(id), receives = receives, error = err,
                             at = now, offered_at = at, cost = cost})
  redis.call('RPUSH', b.dead, info .. '\n' .. payload)
  redis.call('HINCRBY', b.stats, 'dead', 1)
  redis.call('HINCRBY', b.keystats, key .. '\0dead', 1)
end
