-- The wake signal (spliced in at "--#include wake_listener"): how a store wakes a consumer that
-- waits for work (a lingering drain, a continuous consumer) without it polling.
-- `listening` is a zset of the consumers waiting (member: a listener id, score: until when, ms)
-- and `signal` a list they block on (BLPOP) that holds one token at most. A store pushes a
-- token only while a listener is live and the list is empty: nothing grows and nothing is
-- pushed while nobody listens. A live listener counts as a drain: the store sends no drain job
-- (the listener will take the work). The token is a hint: one lost or stale costs one look.

-- A store made work available: wake one listener if any listens and none is being woken.
-- Returns true when a listener is live (the caller then asks for no drain job).
--#include listener_live
local function wake_listener(listening, signal, ttl, now)
  if not listener_live(listening, now) then return false end
  if redis.call('LLEN', signal) == 0 then
    redis.call('RPUSH', signal, 1)
    redis.call('PEXPIRE', signal, ttl)
  end
  return true
end
