-- The worker's heartbeat for one pool: push the deadline of batches still in flight and renew
-- the drain flag (renew_inflight.lua).
-- KEYS[1..21]: the pool's keys (pool_keys.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] batch timeout ms, ARGV[6], ... batch ids held by the worker's process.
-- Reply: the ids no longer in flight (the reaper took them back). Bounded: O(ids * log N).
-- Lost reply: safe to run twice (pushes deadlines of ids still held; a second run pushes them
-- again)
--#include clock
--#include renew_inflight
--#include pool_keys
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local timeout = tonumber(ARGV[5])
check_keys({pool.inflight, 'zset', pool.drains, 'string'})
local ids = {}
for i = 6, #ARGV do ids[#ids + 1] = ARGV[i] end
return renew_inflight(pool.inflight, pool.drains, pool.lease, ids, timeout, math.floor(now_ms()))
