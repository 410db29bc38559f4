-- Shared by the lease scripts (spliced in by the loader at "--#include lease_common").
-- Every lease script receives the same KEYS (see leases.PARTS in leases.py):
-- KEYS[1] resources  set: every resource of the pool
-- KEYS[2] free       zset: free resource -> when it became free (ms); lowest is leased first,
--                    new resources score 0 so the never-used go first
-- KEYS[3] leased     zset: leased resource -> lease expiry (ms, server clock)
-- KEYS[4] tokens     hash: leased resource -> token of its holder
-- KEYS[5] stats      hash: counters (acquired, released, reclaimed, renewed, missed)
-- KEYS[6] notify     list: one entry per resource freed while clients may be waiting
-- KEYS[7] fences     hash: resource -> fencing token of its latest lease (never decreases)
-- KEYS[8] uses       hash: resource -> leases granted on it (one field per resource)
local K_RESOURCES, K_FREE, K_LEASED, K_TOKENS, K_STATS, K_NOTIFY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_FENCES, K_USES = KEYS[7], KEYS[8]

--#include clock

-- The server clock in whole ms (lease expiries feed PX-like integer arithmetic).
local function lease_now()
  return math.floor(now_ms())
end

-- Wake up to `n` waiting clients (BLPOP on notify). The list never holds more entries than
-- there are resources, and disappears when nobody has waited for a minute.
local function wake(n)
  if n <= 0 then return end
  for _ = 1, n do redis.call('RPUSH', K_NOTIFY, 1) end
  redis.call('LTRIM', K_NOTIFY, -redis.call('SCARD', K_RESOURCES), -1)
  redis.call('PEXPIRE', K_NOTIFY, 60000)
end

-- Return up to `limit` expired leases to the free set, scored by their expiry (the moment they
-- really became free), unless the resource was removed meanwhile.
-- Returns how many leases expired and how many resources became free.
local function reclaim(limit, now)
  local expired = redis.call('ZRANGEBYSCORE', K_LEASED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  local returned = 0
  for i = 1, #expired, 2 do
    local resource = expired[i]
    redis.call('ZREM', K_LEASED, resource)
    redis.call('HDEL', K_TOKENS, resource)
    if redis.call('SISMEMBER', K_RESOURCES, resource) == 1 then
      redis.call('ZADD', K_FREE, expired[i + 1], resource)
      returned = returned + 1
    end
  end
  if #expired > 0 then redis.call('HINCRBY', K_STATS, 'reclaimed', #expired / 2) end
  return #expired / 2, returned
end

-- The next fencing token of `resource`: above every token it had, and at least the server time
-- in microseconds. A resource is leased at most once per script run, and no script runs in
-- under a microsecond, so a token never runs ahead of that clock: after Redis lost the
-- `fences` hash (a restart without persistence) the clock alone is above every earlier token,
-- as long as the server clock does not go back. (Whole ms ran ahead of the clock as soon as a
-- resource was leased more than once a ms, and went backwards at the restart.)
-- Microseconds since the epoch stay below 2^53 until the year 2255: exact in a Lua number.
local function next_fence(resource)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('HGET', K_FENCES, resource) or '0') or 0
  local fence = math.max(last + 1, now_us)
  redis.call('HSET', K_FENCES, resource, string.format('%d', fence))
  return fence
end
