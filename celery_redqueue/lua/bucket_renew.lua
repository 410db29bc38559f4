-- The worker's heartbeat for one bucket: push the deadline of reservations still held and
-- renew the drain flag (renew_inflight.lua).
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] reservation timeout ms,
-- ARGV[9], ... reservation ids held by the worker's process.
-- Reply: the ids no longer held (the reaper took them back). Bounded: O(ids * log K).
-- Lost reply: safe to run twice (pushes deadlines of ids still held; a second run pushes them
-- again)
--#include bucket_keys
--#include clock
--#include renew_inflight
--#include check_keys
local b = bucket_keys(KEYS, ARGV)
-- The two keys it writes, before it writes (check_keys.lua: a key of another type is CORRUPT).
check_keys({b.inflight, 'zset', b.drains, 'string'})
local timeout = tonumber(ARGV[8])
local ids = {}
for i = 9, #ARGV do ids[#ids + 1] = ARGV[i] end
return renew_inflight(b.inflight, b.drains, b.lease, ids, timeout, now_ms())
