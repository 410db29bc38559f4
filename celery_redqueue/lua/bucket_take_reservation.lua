-- Forget a reservation (b.inflight, b.res_keys, b.res_items and the in-flight counts); returns
-- its key and slot, or nil when it is not held.
local function bucket_take_reservation(b, reservation)
  local key = redis.call('HGET', b.res_keys, reservation)
  if not key then return nil, nil end
  local slot = redis.call('HGET', b.res_items, reservation)
  redis.call('ZREM', b.inflight, reservation)
  redis.call('HDEL', b.res_keys, reservation)
  redis.call('HDEL', b.res_items, reservation)
  redis.call('HINCRBY', b.stats, 'in_flight', -1)
  redis.call('HINCRBY', b.keystats, key .. '\0in_flight', -1)
  return key, slot
end
