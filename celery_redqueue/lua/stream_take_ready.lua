-- Ordered groups: held entries whose key came free (parked with 0 receives).
--#include stream_entry
--#include stream_receives
--#include stream_redeliver
local function stream_take_ready(s, r)
  while r.ordered and r.handed < r.n and not r.alone do
    local id = redis.call('LPOP', s.ready)
    if not id then return end
    stream_redeliver(s, r, id, stream_entry(s, id), stream_receives(s, r.group, id))
  end
end
