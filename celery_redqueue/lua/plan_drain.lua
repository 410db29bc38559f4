-- The drain flag, its lease and the wake-up of drain jobs (spliced in at
-- "--#include plan_drain"), shared by pools, buckets and their workers' heartbeats.
-- The drain flag (`drains`: how many drain jobs are sent or running) is held on a lease, not
-- a long time-to-live: a job that is sent or running holds it for `lease` ms, and a running job
-- renews it (every pop, and the worker's heartbeat while a body runs), so a job that dies, or
-- whose message was never sent, frees it within `lease`. The `wake` key says "a drain job is
-- scheduled for <ms>" and vanishes at that moment, so a lost scheduled job strands nothing.

-- The one wake mechanism of pools and buckets: the structure next has work at `next_at` (ms;
-- nil: none). Work due now arms the flag unless a job holds it (send one now); later work
-- schedules one job unless one is scheduled no later. A scheduled job never holds the flag,
-- so work due now is never held back by a delayed call.
-- Returns send_now (0|1) and schedule_in_ms (-1: no job to schedule).
local function plan_drain(drains, wake, lease, now, next_at)
  if next_at == nil then return 0, -1 end
  if next_at <= now then
    if redis.call('SET', drains, 1, 'NX', 'PX', lease) then return 1, -1 end
    return 0, -1
  end
  local scheduled = tonumber(redis.call('GET', wake) or '-1') or -1
  if scheduled > now and scheduled <= next_at then return 0, -1 end
  local wait = math.ceil(next_at - now)
  redis.call('SET', wake, string.format('%.17g', next_at), 'PX', math.max(wait, 1))
  return 0, wait
end
