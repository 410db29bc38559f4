-- Shared by every structure's scripts (spliced in by the loader at "--#include common").

-- The server clock in ms, with microseconds as the fraction: one clock for every worker.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

-- Add `n` to `kind`'s counters in the hash `flow`: a per-second ring of 60 slots
-- ("<kind>:<second % 60>" = "<second> <value>") for "per second over the last minute" figures,
-- and a per-minute ring of 60 slots ("<kind>:m<minute % 60>" = "<minute> <value>") for the last
-- hour's history. A slot whose stamp is not the current second (minute) is stale and restarts
-- from `n`: bounded memory (120 fields per kind), no clean-up pass, no extra round trip.
-- Both slots are read in one HMGET and written in one HSET (every producer call ticks).
local function ring_value(old, stamp, n)
  if old then
    local old_stamp, old_value = string.match(old, '^(%d+) (%S+)$')
    if tonumber(old_stamp) == stamp then return tonumber(old_value) + n end
  end
  return n
end

-- A number as '%.17g' writes it; whole numbers (counts) take the cheaper '%d', same text.
local function number_text(value)
  if value == math.floor(value) and math.abs(value) < 1e15 then
    return string.format('%d', value)
  end
  return string.format('%.17g', value)
end

local function tick(flow, kind, n, now)
  if n == 0 then return end
  local sec = math.floor(now / 1000)
  local minute = math.floor(sec / 60)
  local sec_field = kind .. ':' .. string.format('%d', sec % 60)
  local min_field = kind .. ':m' .. string.format('%d', minute % 60)
  local old = redis.call('HMGET', flow, sec_field, min_field)
  redis.call('HSET', flow,
    sec_field, string.format('%d ', sec) .. number_text(ring_value(old[1], sec, n)),
    min_field, string.format('%d ', minute) .. number_text(ring_value(old[2], minute, n)))
end

-- Forget up to 100 ids whose window ended (dedupe ids, processed-guard ids): bounded work per
-- call, and the zset cannot grow without limit.
local function forget_expired(zset, now)
  local old = redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then redis.call('ZREM', zset, unpack(old)) end
end

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
  if running < max_drains and work > running then
    redis.call('INCR', drains)
    return 1
  end
  return 0
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
