-- Shared by the bucket scripts (spliced in by the loader at "--#include bucket_common"): the
-- keys and settings as named locals, then the helpers of bucket_limits, bucket_schedule,
-- bucket_queue and bucket_reservations.
-- Every bucket script receives the same KEYS (see bucket.PARTS in bucket.py):
-- KEYS[1] ready      zset: key -> time (ms) since which the key may release its head item
-- KEYS[2] tat        hash: key -> theoretical arrival time (ms) of its next item (GCRA)
-- KEYS[3] rates      hash: key -> "interval_ms burst" (absent: the default rate)
-- KEYS[4] items      hash: key NUL position -> slot "receives:id:offered_at:payload"
-- KEYS[5] heads      hash: key -> position of its head item
-- KEYS[6] tails      hash: key -> position after its last item
-- KEYS[7] inflight   zset: reservation id -> deadline (ms)
-- KEYS[8] res_keys   hash: reservation id -> key
-- KEYS[9] res_items  hash: reservation id -> slot
-- KEYS[10] stats     hash: counters (seq, enqueued, rejected, dropped, processed, dead, ...)
-- KEYS[11] keystats  hash: key NUL counter -> n (in_flight, processed, dead per key)
-- KEYS[12] dead      list: dead letters, "json NL payload"
-- KEYS[13] drains    string: number of drain jobs pending; absent when none is
-- KEYS[14] wake      string: when (ms) the sleeping drain job will wake up
-- KEYS[15] ages      zset: key -> when (ms) its head item was offered (oldest waiting item)
-- KEYS[16] scheduled zset: "id key NUL payload" -> due time (ms) of a delayed item
-- KEYS[17] dedupe    zset: dedupe id -> end of its window (ms)
-- KEYS[18] done      zset: item id -> end of its processed-guard window (ms)
-- KEYS[19] flow      hash: per-second and per-minute counters (flow.lua)
-- KEYS[20] paused    zset: key -> until when (ms, inf: until resumed) it releases nothing
-- KEYS[21] releases  zset: key -> releases in the current minute (noisy-neighbour figures)
-- KEYS[22] releases_prev zset: the same for the previous minute
-- KEYS[23] calls     hash: call id -> what it did (call_records.lua: re-sent polls, settles)
-- KEYS[24] calls_at  zset: call id -> when its record expires (ms)
-- KEYS[25] signal    list: the wake signal's token (wake_signal.lua)
-- KEYS[26] listening string: present while a consumer waits on the signal
-- Common ARGV: [1] default interval ms, [2] default burst, [3] limits (bucket_limits.lua:
-- concurrency, 1 for an ordered bucket; cost and total rates),
-- [4] max depth per key (0: unbounded), [5] overflow (reject|drop_oldest),
-- [6] drain lease ms (see drain_lease.lua), [7] max receives. Script-specific ARGV start at 8.
--#include common
local K_READY, K_TAT, K_RATES, K_ITEMS, K_HEADS, K_TAILS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_INFLIGHT, K_RES_KEYS, K_RES_ITEMS, K_STATS, K_KEYSTATS = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local K_DEAD, K_DRAINS, K_WAKE, K_AGES, K_SCHEDULED = KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local K_DEDUPE, K_DONE, K_FLOW = KEYS[17], KEYS[18], KEYS[19]
local K_PAUSED, K_RELEASES, K_RELEASES_PREV = KEYS[20], KEYS[21], KEYS[22]
local MAX_DEPTH, OVERFLOW = tonumber(ARGV[4]), ARGV[5]
local K_CALLS, K_CALLS_AT, K_SIGNAL, K_LISTENING = KEYS[23], KEYS[24], KEYS[25], KEYS[26]
local DRAIN_LEASE_MS, MAX_RECEIVES = tonumber(ARGV[6]), tonumber(ARGV[7])
local DEFAULT_INTERVAL, DEFAULT_BURST = tonumber(ARGV[1]), tonumber(ARGV[2])
--#include bucket_limits
--#include bucket_schedule
--#include bucket_queue
--#include bucket_reservations
