-- The wake signal (spliced in at "--#include wake_signal"): how a store wakes a consumer that
-- waits for work (a lingering drain, a continuous consumer) without it polling.
-- `listening` is a zset of the consumers waiting (member: a listener id, score: until when, ms)
-- and `signal` a list they block on (BLPOP) that holds one token at most. A store pushes a
-- token only while a listener is live and the list is empty: nothing grows and nothing is
-- pushed while nobody listens. A live listener counts as a drain: the store sends no drain job
-- (the listener will take the work). The token is a hint: one lost or stale costs one look.

-- True while a listener's deadline is ahead of `now`.
local function listener_live(listening, now)
  local last = redis.call('ZRANGE', listening, -1, -1, 'WITHSCORES')
  return #last > 0 and tonumber(last[2]) > now
end

-- A store made work available: wake one listener if any listens and none is being woken.
-- Returns true when a listener is live (the caller then asks for no drain job).
local function wake_listener(listening, signal, ttl, now)
  if not listener_live(listening, now) then return false end
  if redis.call('LLEN', signal) == 0 then
    redis.call('RPUSH', signal, 1)
    redis.call('PEXPIRE', signal, ttl)
  end
  return true
end

-- The caller (listener `who`) found nothing to hand out: with `ms` > 0 it will wait up to that
-- long on the signal, so it is listed until now + ms (expired listeners are dropped, the zset
-- expires with its last listener) and stale tokens are dropped (this step just saw nothing to
-- do, so a token left in the list woke nobody for anything still there). With `ms` 0 it stops
-- listening: calls stored from now on ask for a drain job again.
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
