-- Reserved items leaving their reservation, and dead letters (spliced in by bucket_common.lua,
-- after bucket_queue).

-- Forget a reservation; returns its key and slot, or nil when it is not held.
local function take_reservation(reservation)
  local key = redis.call('HGET', K_RES_KEYS, reservation)
  if not key then return nil, nil end
  local slot = redis.call('HGET', K_RES_ITEMS, reservation)
  redis.call('ZREM', K_INFLIGHT, reservation)
  redis.call('HDEL', K_RES_KEYS, reservation)
  redis.call('HDEL', K_RES_ITEMS, reservation)
  redis.call('HINCRBY', K_STATS, 'in_flight', -1)
  redis.call('HINCRBY', K_KEYSTATS, key .. '\0in_flight', -1)
  return key, slot
end

-- Append a dead letter with its key, id, receives and the text of its last failure (a
-- malformed slot is kept whole as the payload).
local function bury(key, slot, err, now)
  local receives, id, at, payload, cost = parse_slot(slot)
  if not receives then receives, id, at, payload = 0, nil, now, slot or '' end
  local info = cjson.encode({key = key, id = tonumber(id), receives = receives, error = err,
                             at = now, offered_at = at, cost = cost})
  redis.call('RPUSH', K_DEAD, info .. '\n' .. payload)
  redis.call('HINCRBY', K_STATS, 'dead', 1)
  redis.call('HINCRBY', K_KEYSTATS, key .. '\0dead', 1)
end
