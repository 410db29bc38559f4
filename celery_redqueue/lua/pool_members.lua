-- What a pool entry is: its member, id, payload, count; taking it out; burying it (spliced in
-- by pool_common.lua, whose K_* keys and settings it uses).

-- Pools count whole milliseconds (deadlines and wake-ups feed PX, which takes integers).
local function pool_now()
  return math.floor(now_ms())
end

-- Per-second flow counters of this pool.
local function pool_tick(kind, n, now)
  tick(K_FLOW, kind, n, now)
end

-- The id and payload of a member: coalescing members are their payload, others carry a unique
-- hex prefix. Nil when the member is malformed (only corruption makes one).
local function parse_member(member)
  if COALESCE then return member, member end
  return string.match(member, '^(%x+):(.*)$')
end

local function payload_of(member)
  local _, payload = parse_member(member)
  return payload or member
end

-- Calls an entry stands for; a corrupted count counts as one call.
local function count_of(member)
  if COALESCE then return tonumber(redis.call('HGET', K_COUNTS, member) or '1') or 1 end
  return 1
end

-- Take an entry out of the pool with everything kept about it.
local function forget_entry(member)
  redis.call('ZREM', K_ITEMS, member)
  redis.call('ZREM', K_AGES, member)
  redis.call('HDEL', K_RECEIVES, member)
  if COALESCE then redis.call('HDEL', K_COUNTS, member) end
end

-- Remove an entry with everything kept about it; returns how many calls it stood for.
local function remove(member)
  local n = count_of(member)
  forget_entry(member)
  return n
end

-- Append a dead letter: metadata as JSON, then the payload after a newline.
local function bury(payload, count, receives, err, now)
  local info = cjson.encode({count = count, receives = receives, error = err, at = now})
  redis.call('RPUSH', K_DEAD, info .. '\n' .. payload)
  redis.call('HINCRBY', K_STATS, 'dead', count)
end
