-- Count the members due by the server's clock (ScheduledSet.available).
-- KEYS[1] items  zset: member -> due time, Unix seconds
-- No ARGV.
-- Reply: the count. Read-only. Bounded: O(log N).
-- Lost reply: safe to run twice (read-only)
--#include clock
--#include checked_call
return checked_call('ZCOUNT', KEYS[1], '-inf', string.format('%.6f', now_ms() / 1000))
