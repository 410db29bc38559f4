-- Shared by every structure's scripts (spliced in by the loader at "--#include common").

-- The server clock in ms, with microseconds as the fraction: one clock for every worker.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

-- Add `n` to a per-second counter kept in a ring of 60 slots, "second value" per slot, in the
-- hash `flow`: enough for "per second over the last minute" figures, in bounded memory.
local function tick(flow, kind, n, now)
  if n == 0 then return end
  local sec = math.floor(now / 1000)
  local field = kind .. ':' .. (sec % 60)
  local old = redis.call('HGET', flow, field)
  local value = n
  if old then
    local old_sec, old_value = string.match(old, '^(%d+) (%S+)$')
    if tonumber(old_sec) == sec then value = tonumber(old_value) + n end
  end
  redis.call('HSET', flow, field, sec .. ' ' .. string.format('%.17g', value))
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
