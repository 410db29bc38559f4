-- The third source of a read, new entries (spliced in by stream_read.lua, after
-- stream_deliver, whose `hand` it uses).

-- New entries (XREADGROUP). Returns how many were read, handed out or not.
local function take_new(r)
  if r.handed >= r.n or r.alone then return 0 end
  local read = redis.call('XREADGROUP', 'GROUP', r.group, r.consumer, 'COUNT', r.n - r.handed,
    'STREAMS', K_EVENTS, '>')
  local entries = read and read[1] and read[1][2] or {}
  local last_seq = tonumber(redis.call('HGET', K_GSTATS, 'last_seq') or '0')
  for _, entry in ipairs(entries) do
    local id, f = entry[1], fields_of(entry[2])
    local seq, key = tonumber(f['n']), f['k']
    -- A gap in sequence numbers: the cap trimmed entries before this group read them.
    if seq > last_seq + 1 then redis.call('HINCRBY', K_GSTATS, 'missed', seq - last_seq - 1) end
    if seq > last_seq then last_seq = seq end
    redis.call('HINCRBY', K_GSTATS, 'delivered', 1)
    if f['to'] and f['to'] ~= r.group then
      redis.call('XACK', K_EVENTS, r.group, id)  -- a requeued dead letter of another group
    elseif r.guard and redis.call('ZSCORE', K_DONE, id) then
      redis.call('XACK', K_EVENTS, r.group, id)  -- a replayed entry this group completed
      redis.call('HINCRBY', K_GSTATS, 'guard_skipped', 1)
    elseif r.ordered and key and redis.call('HEXISTS', K_BUSY, 'k:' .. key) == 1 then
      -- An earlier entry of its key is in flight: park it until that one is settled.
      redis.call('XCLAIM', K_EVENTS, r.group, HELD, 0, id, 'RETRYCOUNT', 0, 'JUSTID')
      redis.call('ZADD', K_HELD, 0, held_member(key, id))
    else
      if r.ordered and key then redis.call('HSET', K_BUSY, 'k:' .. key, id, 'i:' .. id, key) end
      hand(r, id, f, 1)
    end
  end
  redis.call('HSET', K_GSTATS, 'last_seq', last_seq)
  return #entries
end
