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
local function ring_add(flow, field, stamp, n)
  local old = redis.call('HGET', flow, field)
  local value = n
  if old then
    local old_stamp, old_value = string.match(old, '^(%d+) (%S+)$')
    if tonumber(old_stamp) == stamp then value = tonumber(old_value) + n end
  end
  redis.call('HSET', flow, field, stamp .. ' ' .. string.format('%.17g', value))
end

local function tick(flow, kind, n, now)
  if n == 0 then return end
  local sec = math.floor(now / 1000)
  local minute = math.floor(sec / 60)
  ring_add(flow, kind .. ':' .. (sec % 60), sec, n)
  ring_add(flow, kind .. ':m' .. (minute % 60), minute, n)
end

-- Forget up to 100 ids whose window ended (dedupe ids, processed-guard ids): bounded work per
-- call, and the zset cannot grow without limit.
local function forget_expired(zset, now)
  local old = redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then redis.call('ZREM', zset, unpack(old)) end
end

-- A drain job at work claims the drain flag (one started by beat finds none), refreshes its
-- time-to-live, and asks for one more job while there is work for more jobs than are running
-- (`work` counts units of work, such as batches or eligible keys), up to `max_drains`.
-- Returns 1 when the caller should send one more drain job, else 0.
local function claim_drain(drains, ttl, max_drains, work)
  local running = tonumber(redis.call('GET', drains) or '0')
  if running == 0 then
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
