-- Shared by the pool scripts (spliced in by the loader at "--#include pool_common"): the keys
-- and settings as named locals, then the helpers of pool_members and pool_admit.
-- Every pool script receives the same KEYS (see pool.PARTS in pool.py), except pool_add, which
-- receives only the first thirteen (what it touches), and pool_add_plain, only the parts its header names:
-- KEYS[1] items           zset: member -> score (lowest popped first; sample evicts the highest)
-- KEYS[2] counts          hash: member -> merged calls (coalescing pools; absent: 1)
-- KEYS[3] stats           hash: counters; `seq` the last entry id taken (pool_ids.lua)
-- KEYS[4] drains          string: number of drain jobs pending; absent when none is
-- KEYS[5] receives        hash: member -> times handed out so far (returned entries only)
-- KEYS[6] ages            zset: lowest score = when (ms) the oldest waiting entry arrived:
--                         arrival slot -> its first arrival (coalescing pools: member -> when)
-- KEYS[7] arrivals        hash: arrival slot -> entries waiting that arrived in it (not
--                         coalescing: an entry's id carries its arrival, so no index per entry)
-- KEYS[8] flow            hash: per-second and per-minute flow counters (flow.lua)
-- KEYS[9] scheduled       zset: "id:score:payload" -> due time (ms)
-- KEYS[10] dedupe         zset: dedupe id -> end of its window (ms)
-- KEYS[11] wake           string: when (ms) a sleeping drain job wakes up
-- KEYS[12] signal         list: the wake signal's token (wake_signal.lua)
-- KEYS[13] listening      zset: listener id -> until when (ms) it waits on the signal
-- KEYS[14] inflight       zset: batch id -> deadline (ms)
-- KEYS[15] inflight_calls hash: batch id -> calls in the batch
-- KEYS[16] inflight_items hash: batch id -> its entries, cmsgpack of a flat list (pool_batch.lua)
-- KEYS[17] dead           list: dead letters, "json NL payload"
-- KEYS[18] done           zset: entry id -> end of its processed-guard window (ms)
-- KEYS[19] calls          hash: call id -> what it did (call_records.lua: re-sent acks)
-- KEYS[20] calls_at       zset: call id -> when its record expires (ms)
-- Common ARGV: [1] capacity, [2] policy (sample|newest|reject), [3] coalesce (1|0),
-- [4] drain lease ms (see drain_lease.lua).
local K_ITEMS, K_COUNTS, K_STATS, K_DRAINS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_RECEIVES, K_AGES, K_ARRIVALS, K_FLOW = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_SCHEDULED, K_DEDUPE, K_WAKE = KEYS[9], KEYS[10], KEYS[11]
local K_SIGNAL, K_LISTENING = KEYS[12], KEYS[13]
local K_INFLIGHT, K_INFLIGHT_CALLS, K_INFLIGHT_ITEMS = KEYS[14], KEYS[15], KEYS[16]
local K_DEAD, K_DONE, K_CALLS, K_CALLS_AT = KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local CAPACITY, POLICY, COALESCE, DRAIN_LEASE_MS = tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1', ARGV[4]
--#include common
--#include pool_ids
--#include pool_members
--#include pool_admit
