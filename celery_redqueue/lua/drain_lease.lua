-- The drain lease and the wake-up of drain jobs (spliced in at "--#include drain_lease", from
-- common.lua), shared by pools, buckets and their workers' heartbeats.

-- The drain flag (`drains`: how many drain jobs are pending or running) is a lease, not a
-- long time-to-live: a job that is sent or running holds it for `lease` ms, and a running job
-- renews it (every pop, and the worker's heartbeat while a body runs), so a job that dies, or
-- whose message was never sent, frees it within `lease`. The `wake` key says "a drain job is
-- scheduled for <ms>" and vanishes at that moment, so a lost scheduled job strands nothing.

-- A drain job at work claims the drain flag (one started by beat finds none), renews its
-- lease, and asks for one more job while there is work for more jobs than are running
-- (`work` counts units of work, such as batches or eligible keys), up to `max_drains`.
-- Returns 1 when the caller should send one more drain job, else 0.
local function claim_drain(drains, ttl, max_drains, work)
  local running = tonumber(redis.call('GET', drains) or '0') or 0
  if running <= 0 then
    running = 1
    redis.call('SET', drains, 1, 'PX', ttl)
  else
    redis.call('PEXPIRE', drains, ttl)
  end
  if running >= max_drains or work <= running then return 0 end
  redis.call('INCR', drains)
  return 1
end

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

-- The heartbeat of a worker: push the deadline of each id still in the in-flight zset to
-- now + `timeout` (XX: an id the reaper took back stays gone) and renew the drain lease if a
-- job holds it. Returns the ids that were no longer in flight.
local function renew_inflight(inflight, drains, lease, ids, timeout, now)
  local missing = {}
  for _, id in ipairs(ids) do
    if redis.call('ZADD', inflight, 'XX', 'CH', now + timeout, id) == 0
        and not redis.call('ZSCORE', inflight, id) then
      missing[#missing + 1] = id
    end
  end
  redis.call('PEXPIRE', drains, lease)
  return missing
end

-- What a consuming script (pool_pop, bucket_dequeue, stream_read) found, the first field of its
-- reply: handed work out; nothing, lease released (so nothing arriving later is stranded);
-- nothing, lease kept (linger); only skipped entries, more wait (take again now); nothing due
-- before the wait the reply gives; nothing taken, the structure's upkeep script must run first
-- (due delayed work to offer), then take again; nothing taken, the entries to take need the
-- general script (pool_pop_mixed: returned, coalesced, guarded or malformed entries).
-- redis/lua.py names the same values for Python (a test checks they agree).
local EMPTY, TAKEN, LINGER, AGAIN, LATER, UPKEEP, MIXED = 0, 1, 2, 3, 4, 5, 6

-- A reaper's drain: when work is due (`due`), send a drain if it took work back (`took_back`:
-- re-arm the lease even if the dead drain's lease has not run out yet), or if no drain holds
-- the lease (it expired over the work: a drain killed while it lingered, a call made while a
-- dead drain's lease held the flag, a Redis restart under a drain). Returns send_drain (0|1).
local function rearm_drain(drains, lease, took_back, due)
  if not due then return 0 end
  if took_back then
    redis.call('SET', drains, 1, 'PX', lease)
    return 1
  end
  if redis.call('SET', drains, 1, 'NX', 'PX', lease) then return 1 end
  return 0
end
