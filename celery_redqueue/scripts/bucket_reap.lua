-- Return reservations whose deadline passed to the head of their key's queue and make the key
-- eligible again; past max_receives the item goes to the dead-letter list instead.
-- KEYS: as in bucket_enqueue.lua (ready, tat, rates, items, heads, tails, inflight, res_keys,
-- res_items, stats, keystats, dead, drains, wake).
-- ARGV[1] default interval ms, ARGV[2] default burst, ARGV[3] ordered (1|0)
-- ARGV[4] max receives, ARGV[5] most reservations to reap in this call
-- ARGV[6] drain flag time-to-live ms
-- Returns {returned, dead_lettered, send_drain}. Bounded: O(limit * log K).
local ready, tat, rates, items, heads, tails = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local inflight, res_keys, res_items = KEYS[7], KEYS[8], KEYS[9]
local stats, keystats, dead, drains = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local max_receives = tonumber(ARGV[4])

--#include bucket_common
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
local returned, buried = 0, 0
for _, reservation in ipairs(expired) do
  local key = redis.call('HGET', res_keys, reservation)
  local slot = redis.call('HGET', res_items, reservation)
  redis.call('ZREM', inflight, reservation)
  redis.call('HDEL', res_keys, reservation)
  redis.call('HDEL', res_items, reservation)
  if key and slot then
    redis.call('HINCRBY', stats, 'in_flight', -1)
    redis.call('HINCRBY', keystats, key .. '\0in_flight', -1)
    local receives, id, payload = string.match(slot, '^(%d+):(%d+):(.*)$')
    if tonumber(receives) >= max_receives then
      local info = cjson.encode({key = key, id = tonumber(id), receives = tonumber(receives),
                                 error = 'reservation expired ' .. receives .. ' times', at = now})
      redis.call('RPUSH', dead, info .. '\n' .. payload)
      redis.call('HINCRBY', stats, 'dead', 1)
      redis.call('HINCRBY', keystats, key .. '\0dead', 1)
      buried = buried + 1
    else
      local head = redis.call('HINCRBY', heads, key, -1)
      redis.call('HSET', items, key .. '\0' .. head, slot)
      redis.call('HINCRBY', stats, 'depth', 1)
      redis.call('HINCRBY', stats, 'redelivered', 1)
      -- The published design lost such items when their key had left the ready set.
      if not redis.call('ZSCORE', ready, key) then
        redis.call('ZADD', ready, eligible_at(key, now), key)
      end
      returned = returned + 1
    end
  end
end
local send = 0
if returned > 0 and redis.call('SET', drains, 1, 'NX', 'PX', ARGV[6]) then send = 1 end
return {returned, buried, send}
