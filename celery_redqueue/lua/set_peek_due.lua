-- Return the due member at a position, without removing it (ScheduledSet).
-- KEYS[1] items  zset: member -> due time, Unix seconds
-- ARGV[1] position among the due members, 0 first
-- Returns {member} or {} when fewer members are due. Read-only. Bounded: O(log N + position).
local now = redis.call('TIME')
local due = tonumber(now[1]) + tonumber(now[2]) / 1000000
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%.6f', due),
  'LIMIT', tonumber(ARGV[1]), 1)
