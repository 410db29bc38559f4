-- Append a dead letter (s.dead) in the shared format (structures/deadletters.py): the group
-- goes where a bucket puts its key, the entry id under "entry", its partition key under
-- "pkey"; `f` holds the entry's fields. Counted in s.gstats.
local function stream_bury(s, group, id, f, receives, err, now)
  local info = cjson.encode({count = 1, receives = receives, error = err, at = now,
    key = group, entry = id, pkey = f['k']})
  redis.call('RPUSH', s.dead, info .. '\n' .. f['d'])
  redis.call('HINCRBY', s.gstats, 'dead', 1)
end
