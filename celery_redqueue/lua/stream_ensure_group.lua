-- Create the group unless it exists, at the end of the stream; its read position in sequence
-- numbers (gstats last_seq) starts there. A group recorded (s.groups) whose stream key is gone
-- (evicted, deleted by hand) is created again rather than failing every read with NOGROUP.
local function stream_ensure_group(s, group, gstats, now)
  if redis.call('HEXISTS', s.groups, group) == 1 and redis.call('EXISTS', s.events) == 1 then
    return
  end
  local created = redis.pcall('XGROUP', 'CREATE', s.events, group, '$', 'MKSTREAM')
  if type(created) == 'table' and created.err then
    if not string.find(created.err, 'BUSYGROUP') then error(created.err) end
  else
    redis.call('HSET', gstats, 'last_seq', redis.call('HGET', s.stats, 'seq') or '0')
  end
  redis.call('HSET', s.groups, group, math.floor(now))
end
