-- A pending entry handed out (again), `counted` times so far: trimmed, guarded or worn out
-- entries are settled instead; otherwise the consumer owns it with its new count.
--#include stream_drop
--#include stream_hand
--#include stream_bury
local function stream_redeliver(s, r, id, f, counted)
  if not f then
    stream_drop(s, r, id)  -- the cap trimmed it before it was acknowledged: nothing left to deliver
    redis.call('HINCRBY', s.gstats, 'lost', 1)
  elseif r.guard and redis.call('ZSCORE', s.done, id) then
    stream_drop(s, r, id)
    redis.call('HINCRBY', s.gstats, 'guard_skipped', 1)
  elseif counted + 1 > r.max_receives then
    stream_bury(s, r.group, id, f, counted, 'not acknowledged after ' .. counted ..
      ' receives (visibility timeout ' .. r.visibility .. ' ms)', r.now)
    stream_drop(s, r, id)
  else
    redis.call('XCLAIM', s.events, r.group, r.consumer, 0, id,
      'RETRYCOUNT', counted + 1, 'JUSTID')
    if counted > 0 then redis.call('HINCRBY', s.gstats, 'redelivered', 1) end
    stream_hand(r, id, f, counted + 1)
  end
end
