-- Add one member scored by the Redis server's clock plus an offset (TimeSortedSet, ScheduledSet).
-- KEYS[1] items  zset: member -> score, Unix seconds
-- ARGV[1] offset in seconds added to the server's time (0: now; a delay for scheduled sets)
-- ARGV[2] member (the serialized item)
-- Returns the score given, as a string (a Lua number would be truncated to an integer).
-- Bounded: O(log N).
local now = redis.call('TIME')
local score = string.format('%.6f', tonumber(now[1]) + tonumber(now[2]) / 1000000 + tonumber(ARGV[1]))
redis.call('ZADD', KEYS[1], score, ARGV[2])
return score
