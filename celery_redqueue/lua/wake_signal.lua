-- The wake signal (spliced in at "--#include wake_signal"): how a store wakes a consumer that
-- waits for work (a lingering drain, a continuous consumer) without it polling.
-- `listening` is a marker with a time-to-live, set while a consumer waits; `signal` a list
-- the consumer blocks on (BLPOP) that holds one token at most. A store pushes a token only
-- when the marker exists and the list is empty: nothing grows and nothing is pushed while
-- nobody listens. The token is a hint: one lost or stale costs one look, never a call.

-- A store made work available: wake one listener, if any listens and none is being woken.
local function wake_listener(listening, signal, ttl)
  if redis.call('EXISTS', listening) == 1 and redis.call('LLEN', signal) == 0 then
    redis.call('RPUSH', signal, 1)
    redis.call('PEXPIRE', signal, ttl)
  end
end

-- The caller found nothing to hand out and will wait up to `ms` on the signal: mark it
-- listening (a longer wait of another listener is kept) and drop stale tokens (this step just
-- saw nothing to do, so a token left in the list woke nobody for anything still there).
local function listen_for(listening, signal, ms)
  if ms <= 0 then return end
  if redis.call('PTTL', listening) < ms then redis.call('SET', listening, 1, 'PX', ms) end
  redis.call('DEL', signal)
end
