-- The caller (listener `who`) found nothing to hand out: with `ms` > 0 it will wait up to that
-- long on the signal, so it is listed until now + ms (expired listeners are dropped, the zset
-- expires with its last listener) and stale tokens are dropped (this step just saw nothing to
-- do, so a token left in the list woke nobody for anything still there). With `ms` 0 it stops
-- listening: calls stored from now on ask for a drain job again.
-- (The wake signal: see wake_listener.lua.)
local function listen_for(listening, signal, who, ms, now)
  if ms <= 0 then
    if who ~= '' then redis.call('ZREM', listening, who) end
    return
  end
  redis.call('ZADD', listening, now + ms, who)
  redis.call('ZREMRANGEBYSCORE', listening, '-inf', now)
  local last = redis.call('ZRANGE', listening, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', listening, math.ceil(tonumber(last[2]) - now))
  redis.call('DEL', signal)
end
