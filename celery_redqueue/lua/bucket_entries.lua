-- Taking items out of a bucket's queues, each read and parsed before anything is written
-- (spliced in by the loader at "--#include bucket_entries", after bucket_common). Redis keeps
-- the writes of a script that fails half-way, so a malformed entry is dead-lettered with the
-- reason instead of failing the script after its first writes.

-- Due delayed items join the tail of their key's queue, in due order (at most 100 per call).
-- A malformed one is dead-lettered (counted as enqueued and dead). Returns how many were.
local function offer_due_items(now)
  local due = redis.call('ZRANGEBYSCORE', K_SCHEDULED, '-inf', now, 'LIMIT', 0, 100)
  local parsed, malformed = {}, 0
  for i, entry in ipairs(due) do
    -- "id key NUL payload", or "id/cost key NUL payload" for a call with a cost.
    local id, cost, key, payload = string.match(entry, '^(%d+)/?([%d.]*) ([^%z]*)%z(.*)$')
    parsed[i] = {id = id, key = key, payload = payload, cost = tonumber(cost or '')}
  end
  for i, entry in ipairs(due) do
    redis.call('ZREM', K_SCHEDULED, entry)
    local p = parsed[i]
    if not p.id then
      bury('', entry, 'malformed entry: unreadable delayed item', now)
      redis.call('HINCRBY', K_STATS, 'enqueued', 1)
      malformed = malformed + 1
    elseif append(p.key, make_slot(0, p.id, now, p.payload, p.cost), now) == 0 then
      redis.call('HINCRBY', K_STATS, 'rejected', 1)
    else
      redis.call('HINCRBY', K_STATS, 'enqueued', 1)
    end
  end
  if #due > 0 then redis.call('HINCRBY', K_STATS, 'delayed', -#due) end
  return malformed
end

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

-- Releases per key over the last minute, for the noisy-neighbour figures: K_RELEASES counts this
-- minute's, K_RELEASES_PREV the previous minute's (renamed, not copied, when the minute rolls;
-- both hold only keys that released lately). The bucket's totals need no counter of their own:
-- every release is one `receives` (reserve counts it), so K_STATS keeps `releases_base`, the
-- receives when this minute began, and `releases_prev`, the previous minute's total. One
-- command a release (ZINCRBY) beside the minute check; the roll runs once a minute.
local function count_release(key, now)
  local minute = math.floor(now / 60000)
  local current = tonumber(redis.call('HGET', K_STATS, 'releases_minute') or '-1')
  if current ~= minute then
    local counts = redis.call('HMGET', K_STATS, 'receives', 'releases_base')
    local receives = tonumber(counts[1] or '0') or 0
    local last = receives - (tonumber(counts[2] or '0') or 0)
    redis.call('DEL', K_RELEASES_PREV)
    if current == minute - 1 and redis.call('EXISTS', K_RELEASES) == 1 then
      redis.call('RENAME', K_RELEASES, K_RELEASES_PREV)
    else
      redis.call('DEL', K_RELEASES)
      last = 0
    end
    redis.call('HSET', K_STATS, 'releases_minute', minute, 'releases_prev', last,
               'releases_base', receives)
  end
  redis.call('ZINCRBY', K_RELEASES, 1, key)
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
  count_release(key, now)
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
