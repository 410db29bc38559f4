-- Remove and return up to n members whose score is due by the server's clock (ScheduledSet).
-- KEYS[1] items  zset: member -> due time, Unix seconds
-- ARGV[1] n, the most members to pop
-- Returns the popped members, earliest due first. One atomic step, so concurrent consumers
-- each receive a member exactly once. Bounded: O(log N + n log N).
local now = redis.call('TIME')
local due = tonumber(now[1]) + tonumber(now[2]) / 1000000
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%.6f', due),
  'LIMIT', 0, tonumber(ARGV[1]))
for i = 1, #members do
  redis.call('ZREM', KEYS[1], members[i])
end
return members
