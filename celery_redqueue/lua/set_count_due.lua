-- Count the members due by the server's clock (ScheduledSet.available).
-- KEYS[1] items  zset: member -> due time, Unix seconds
-- No ARGV.
-- Returns the count. Read-only. Bounded: O(log N).
local now = redis.call('TIME')
local due = tonumber(now[1]) + tonumber(now[2]) / 1000000
return redis.call('ZCOUNT', KEYS[1], '-inf', string.format('%.6f', due))
