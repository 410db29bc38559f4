-- Shared by the stream scripts (spliced in by the loader at "--#include stream_common").
-- Every stream script receives the stream's KEYS first (see streams.PARTS in streams.py):
-- KEYS[1] events  stream: entries with fields d (payload), n (sequence number), k (partition
--                 key, optional), to (the one group a requeued dead letter is for, optional)
-- KEYS[2] stats   hash: seq (last sequence number given), published, requeued, trimmed
-- KEYS[3] flow    hash: per-second ring counters ("in") for the last minute
-- KEYS[4] groups  hash: group -> when (ms) it was created
-- KEYS[5] dead    list: dead letters, "json NL payload"
-- Scripts that act for one group receive that group's keys next (streams.GROUP_PARTS):
-- KEYS[6] gstats  hash: last_seq (sequence number of the last entry read), delivered,
--                 redelivered, processed, retried, dead, missed, lost, guard_skipped, cursor
-- KEYS[7] gflow   hash: per-second ring counters ("out", "busy", "done")
-- KEYS[8] drain   string: the drain lease; present while a drain job is pending or running
-- KEYS[9] done    zset: entry id -> end of its processed-guard window (ms)
-- KEYS[10] busy   hash: "k:" key -> entry id in flight, "i:" id -> key (ordered groups)
-- KEYS[11] held   zset (all scores 0): "key NL padded id", entries waiting for their key
-- KEYS[12] ready  list: held entry ids whose key came free, delivered before anything else
local K_EVENTS, K_STATS, K_FLOW, K_GROUPS, K_DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_GSTATS, K_GFLOW, K_DRAIN, K_DONE = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local K_BUSY, K_HELD, K_READY = KEYS[10], KEYS[11], KEYS[12]

--#include common

-- The pseudo-consumer that owns entries parked behind an earlier entry of their key.
local HELD = '~held'

-- Fields of an entry as a table (XRANGE/XREADGROUP give a flat list).
local function fields_of(flat)
  local f = {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  return f
end

-- The entry `id` as {id, fields}, or nil when the cap trimmed it away.
local function entry_of(id)
  local found = redis.call('XRANGE', K_EVENTS, id, id)
  if #found == 0 then return nil end
  return fields_of(found[1][2])
end

-- Create the group unless it exists, at the end of the stream; its read position in sequence
-- numbers starts there. A group recorded here whose stream key is gone (evicted, deleted by
-- hand) is created again rather than failing every read with NOGROUP.
local function ensure_group(group, gstats, now)
  if redis.call('HEXISTS', K_GROUPS, group) == 1 and redis.call('EXISTS', K_EVENTS) == 1 then
    return
  end
  local created = redis.pcall('XGROUP', 'CREATE', K_EVENTS, group, '$', 'MKSTREAM')
  if type(created) == 'table' and created.err then
    if not string.find(created.err, 'BUSYGROUP') then error(created.err) end
  else
    redis.call('HSET', gstats, 'last_seq', redis.call('HGET', K_STATS, 'seq') or '0')
  end
  redis.call('HSET', K_GROUPS, group, math.floor(now))
end

-- Stream ids compare as numbers "ms-seq"; zero-padded they also compare as strings.
local function padded(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return string.rep('0', 20 - #ms) .. ms .. '-' .. string.rep('0', 20 - #seq) .. seq
end

local function held_member(key, id)
  return key .. '\n' .. padded(id)
end

-- Ordered groups: the entry `id` no longer holds its key; the next held entry of that key (if
-- any) takes the key and is queued in `ready`. Returns 1 when an entry became ready.
local function release_key(id)
  local key = redis.call('HGET', K_BUSY, 'i:' .. id)
  if not key then return 0 end
  redis.call('HDEL', K_BUSY, 'i:' .. id)
  if redis.call('HGET', K_BUSY, 'k:' .. key) ~= id then return 0 end
  local nxt = redis.call('ZRANGEBYLEX', K_HELD, '[' .. key .. '\n', '[' .. key .. '\n\255',
    'LIMIT', 0, 1)
  if #nxt == 0 then
    redis.call('HDEL', K_BUSY, 'k:' .. key)
    return 0
  end
  redis.call('ZREM', K_HELD, nxt[1])
  local ms, seq = string.match(string.sub(nxt[1], #key + 2), '^0*(%d+)-0*(%d+)$')
  local next_id = ms .. '-' .. seq
  redis.call('HSET', K_BUSY, 'k:' .. key, next_id, 'i:' .. next_id, key)
  redis.call('RPUSH', K_READY, next_id)
  return 1
end

-- Append a dead letter in the shared format (structures/deadletters.py): the group goes where
-- a bucket puts its key, the entry id under "entry", its partition key under "pkey".
-- `f` holds the entry's fields.
local function bury(group, id, f, receives, err, now)
  local info = cjson.encode({count = 1, receives = receives, error = err, at = now,
    key = group, entry = id, pkey = f['k']})
  redis.call('RPUSH', K_DEAD, info .. '\n' .. f['d'])
  redis.call('HINCRBY', K_GSTATS, 'dead', 1)
end

-- How many times `id` has been handed to the group (0 when it is not pending).
local function deliveries_of(group, id)
  local row = redis.call('XPENDING', K_EVENTS, group, id, id, 1)[1]
  if not row then return 0, nil end
  return tonumber(row[4]), row[2]
end

-- Append one entry to the stream under the cap; returns its id and how many entries the cap
-- trimmed away (XLEN before + 1 - XLEN after: exact, whatever approximate trimming removed).
local function append(maxlen, payload, key, to)
  local before = redis.call('XLEN', K_EVENTS)
  local seq = redis.call('HINCRBY', K_STATS, 'seq', 1)
  local args = {'XADD', K_EVENTS}
  if maxlen > 0 then
    args[#args + 1] = 'MAXLEN'; args[#args + 1] = '~'; args[#args + 1] = maxlen
  end
  args[#args + 1] = '*'
  args[#args + 1] = 'd'; args[#args + 1] = payload
  args[#args + 1] = 'n'; args[#args + 1] = seq
  if key ~= '' then args[#args + 1] = 'k'; args[#args + 1] = key end
  if to ~= '' then args[#args + 1] = 'to'; args[#args + 1] = to end
  local id = redis.call(unpack(args))
  local trimmed = before + 1 - redis.call('XLEN', K_EVENTS)
  if trimmed > 0 then redis.call('HINCRBY', K_STATS, 'trimmed', trimmed) end
  return id, trimmed
end
