-- The next fencing token of `resource`: above every token it had, and at least the server time
-- in microseconds. A resource is leased at most once per script run, and no script runs in
-- under a microsecond, so a token never runs ahead of that clock: after Redis lost the
-- `fences` hash (a restart without persistence) the clock alone is above every earlier token,
-- as long as the server clock does not go back. (Whole ms ran ahead of the clock as soon as a
-- resource was leased more than once a ms, and went backwards at the restart.)
-- Microseconds since the epoch stay below 2^53 until the year 2255: exact in a Lua number.
local function lease_next_fence(leases, resource)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('HGET', leases.fences, resource) or '0') or 0
  local fence = math.max(last + 1, now_us)
  redis.call('HSET', leases.fences, resource, string.format('%d', fence))
  return fence
end
