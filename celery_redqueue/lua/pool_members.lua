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

-- The id of a member (its text, and its number when not coalescing): coalescing members are
-- their payload, others carry a unique hex id (pool_ids.lua) and ':' before it. Nil when the
-- member is malformed (only corruption makes one). A plain find, not a pattern: this runs for
-- every popped entry.
local function id_of(member)
  if COALESCE then return member end
  local colon = string.find(member, ':', 1, true)
  if not colon or colon == 1 then return nil end
  local id = string.sub(member, 1, colon - 1)
  local n = tonumber(id, 16)
  if not n then return nil end
  return id, n
end

-- The id and payload of a member (nil when it is malformed).
local function parse_member(member)
  local id = id_of(member)
  if not id then return nil end
  if COALESCE then return id, member end
  return id, string.sub(member, #id + 2)
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

-- An entry joins the ages index: coalescing pools keep its member (`offered_at` ms), others
-- count it in the arrival slot its id names (`offered_at` is that slot's age if it was empty).
local function note_arrival(member, offered_at)
  if COALESCE then
    redis.call('ZADD', K_AGES, offered_at, member)
    return
  end
  local _, n = id_of(member)
  local _, slot = arrival_of(n)
  arrive(K_AGES, K_ARRIVALS, slot, offered_at, 1)
end

-- Take an entry out of the pool with everything kept about it.
local function forget_entry(member)
  redis.call('ZREM', K_ITEMS, member)
  redis.call('HDEL', K_RECEIVES, member)
  if COALESCE then
    redis.call('ZREM', K_AGES, member)
    redis.call('HDEL', K_COUNTS, member)
    return
  end
  local _, n = id_of(member)
  if n then
    local _, slot = arrival_of(n)
    depart(K_AGES, K_ARRIVALS, {[slot] = 1})
  end
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
