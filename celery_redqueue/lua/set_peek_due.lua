-- Return the due member at a position, without removing it (ScheduledSet).
-- KEYS[1] items  zset: member -> due time, Unix seconds
-- ARGV[1] position among the due members, 0 first
-- Reply: {member} or {} when fewer members are due. Read-only. Bounded: O(log N + position).
-- Lost reply: safe to run twice (read-only)
--#include clock
--#include checked_call
local position = tonumber(ARGV[1])
local due = string.format('%.6f', now_ms() / 1000)
return checked_call('ZRANGEBYSCORE', KEYS[1], '-inf', due, 'LIMIT', position, 1)
