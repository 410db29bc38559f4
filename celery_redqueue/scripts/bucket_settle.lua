-- Settle one reservation: commit it, put it back (now or after a delay), or dead-letter it.
-- KEYS: as in bucket_enqueue.lua (ready, tat, rates, items, heads, tails, inflight, res_keys,
-- res_items, stats, keystats, dead, drains, wake).
-- ARGV[1] default interval ms, ARGV[2] default burst, ARGV[3] ordered (1|0)
-- ARGV[4] reservation id
-- ARGV[5] action: commit | release | dead
-- ARGV[6] release: delay ms before the key may release again; dead: the error text
-- ARGV[7] drain flag time-to-live ms
-- Returns 0 when the reservation is not (or no longer) held, else 1; for release, 2 means the
-- drain flag was armed here and the caller should send a drain job.
local ready, tat, rates, items, heads, tails = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local inflight, res_keys, res_items = KEYS[7], KEYS[8], KEYS[9]
local stats, keystats, dead, drains = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
--#include bucket_common
local ordered = ARGV[3] == '1'
local reservation, action = ARGV[4], ARGV[5]

local key = redis.call('HGET', res_keys, reservation)
if not key then
  return 0
end
local slot = redis.call('HGET', res_items, reservation)
redis.call('ZREM', inflight, reservation)
redis.call('HDEL', res_keys, reservation)
redis.call('HDEL', res_items, reservation)
redis.call('HINCRBY', stats, 'in_flight', -1)
redis.call('HINCRBY', keystats, key .. '\0in_flight', -1)

local now = now_ms()

local result = 1
if action == 'commit' then
  redis.call('HINCRBY', stats, 'processed', 1)
  redis.call('HINCRBY', keystats, key .. '\0processed', 1)
elseif action == 'release' then
  -- Back to the head of its key's queue; the whole key waits out the delay (an HTTP 429 is
  -- about the key, and the key's order is kept).
  local head = redis.call('HINCRBY', heads, key, -1)
  redis.call('HSET', items, key .. '\0' .. head, slot)
  redis.call('HINCRBY', stats, 'depth', 1)
  local when = eligible_at(key, now + tonumber(ARGV[6]))
  -- GT: never pull an already later eligibility forward; adds the key when it is absent.
  redis.call('ZADD', ready, 'GT', when, key)
  if redis.call('SET', drains, 1, 'NX', 'PX', ARGV[7]) then result = 2 end
else
  local receives, id, payload = string.match(slot, '^(%d+):(%d+):(.*)$')
  local info = cjson.encode({key = key, id = tonumber(id), receives = tonumber(receives),
                             error = ARGV[6], at = now})
  redis.call('RPUSH', dead, info .. '\n' .. payload)
  redis.call('HINCRBY', stats, 'dead', 1)
  redis.call('HINCRBY', keystats, key .. '\0dead', 1)
end

-- An ordered key waits for its in-flight item; once settled, its next item may go.
if ordered and action ~= 'release' and not redis.call('ZSCORE', ready, key)
    and tonumber(redis.call('HGET', tails, key) or '0') > tonumber(redis.call('HGET', heads, key) or '0') then
  redis.call('ZADD', ready, eligible_at(key, now), key)
end
return result
