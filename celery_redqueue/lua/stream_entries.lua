-- Entries of a stream and its groups: fields, groups, receives, appends, dead letters
-- (spliced in by stream_common.lua, whose K_* keys it uses).

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
local function receives_of(group, id)
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
