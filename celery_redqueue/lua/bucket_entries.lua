-- Taking items out of a bucket's queues, each read and parsed before anything is written
-- (spliced in by the loader at "--#include bucket_entries", after bucket_common). Redis keeps
-- the writes of a script that fails half-way, so a malformed entry is dead-lettered with the
-- reason instead of failing the script after its first writes.

-- Take the head item off a key's queue. Returns its slot (nil if missing) and how many items
-- the key still holds.
local function take_head(key)
  local head = tonumber(redis.call('HGET', K_HEADS, key) or '0') or 0
  local field = key .. '\0' .. head
  local slot = redis.call('HGET', K_ITEMS, field)
  local remaining = key_depth(key) - 1
  redis.call('HDEL', K_ITEMS, field)
  redis.call('HINCRBY', K_STATS, 'depth', -1)
  if remaining <= 0 then
    redis.call('HDEL', K_HEADS, key)
    redis.call('HDEL', K_TAILS, key)
  else
    redis.call('HSET', K_HEADS, key, head + 1)
  end
  refresh_age(key)
  return slot or nil, remaining
end

-- Reserve a released item until now + timeout_ms, and advance its key's schedules (GCRA: from
-- the key's own theoretical arrival time, so a consumer late by less than the burst allowance
-- loses no throughput, and none can exceed the rate; its cost window by the call's cost; the
-- bucket's total schedule by one call). The key stays eligible, from the latest of its
-- schedules and pause, while it has items and room for another call in flight. Returns the
-- reservation id and its deadline.
local function reserve(key, id, receives, at, payload, remaining, timeout_ms, now, cost)
  local interval, burst, ok = rate_of(key)
  if not ok then redis.log(redis.LOG_WARNING, 'redqueue: malformed rate of key ' .. key) end
  local tat = tonumber(redis.call('HGET', K_TAT, key) or '0') or 0
  local next_tat = math.max(tat, now) + interval
  redis.call('HSET', K_TAT, key, string.format('%.17g', next_tat))
  local window = charge_cost(key, cost or 1, now)
  charge_total(now)
  -- The noisy-neighbour figures (bucket_upkeep.lua rolls the minute before a poll releases).
  redis.call('ZINCRBY', K_RELEASES, 1, key)
  redis.call('HINCRBY', K_KEYSTATS, key .. '\0in_flight', 1)
  local when = math.huge
  if remaining > 0 and not at_capacity(key) then
    when = math.max(next_tat - burst * interval, limits_at(key))
  end
  if when < math.huge then
    redis.call('ZADD', K_READY, when, key)
  else
    redis.call('ZREM', K_READY, key)
  end
  local reservation = id .. '.' .. receives
  local deadline = now + timeout_ms
  redis.call('ZADD', K_INFLIGHT, deadline, reservation)
  redis.call('HSET', K_RES_KEYS, reservation, key)
  redis.call('HSET', K_RES_ITEMS, reservation, make_slot(receives, id, at, payload, cost, window))
  redis.call('HINCRBY', K_STATS, 'in_flight', 1)
  redis.call('HINCRBY', K_STATS, 'receives', 1)
  if receives > 1 then redis.call('HINCRBY', K_STATS, 'redelivered', 1) end
  return reservation, deadline
end
