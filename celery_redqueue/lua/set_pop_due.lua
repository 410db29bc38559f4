-- Remove and return up to n members whose score is due by the server's clock (ScheduledSet).
-- KEYS[1] items  zset: member -> due time, Unix seconds
-- ARGV[1] n, the most members to pop
-- Reply: the popped members, earliest due first. One atomic step, so concurrent consumers
-- each receive a member exactly once. Bounded: O(log N + n log N).
-- Lost reply: raises (a second run would pop other members; the first run's are gone with the
-- reply)
--#include clock
--#include checked_call
local n = tonumber(ARGV[1])
local due = string.format('%.6f', now_ms() / 1000)
local members = checked_call('ZRANGEBYSCORE', KEYS[1], '-inf', due, 'LIMIT', 0, n)
for i = 1, #members do
  redis.call('ZREM', KEYS[1], members[i])
end
return members
