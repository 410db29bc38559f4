-- Add one member scored by the Redis server's clock plus an offset (TimeSortedSet, ScheduledSet).
-- KEYS[1] items  zset: member -> score, Unix seconds
-- ARGV[1] offset in seconds added to the server's time (0: now; a delay for scheduled sets)
-- ARGV[2] member (the serialized item)
-- Reply: the score given, as a string (a Lua number would be truncated to an integer).
-- Bounded: O(log N).
-- Lost reply: safe to run twice (a set: the member is added once; its due time moves by the
-- re-send's delay)
--#include clock
--#include checked_call
local offset, member = tonumber(ARGV[1]), ARGV[2]
local score = string.format('%.6f', now_ms() / 1000 + offset)
checked_call('ZADD', KEYS[1], score, member)
return score
