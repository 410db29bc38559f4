-- Shared by the stream scripts (spliced in by the loader at "--#include stream_common"): the
-- keys as named locals, then the helpers of stream_entries and stream_order.
-- Every stream script receives the stream's KEYS first (see streams.PARTS in streams.py):
-- KEYS[1] events  stream: entries with fields d (payload), n (sequence number), k (partition
--                 key, optional), to (the one group a requeued dead letter is for, optional)
-- KEYS[2] stats   hash: seq (last sequence number given), published, requeued, trimmed
-- KEYS[3] flow    hash: flow counters ("in"; flow.lua)
-- KEYS[4] groups  hash: group -> when (ms) it was created
-- KEYS[5] dead    list: dead letters, "json NL payload"
-- Scripts that act for one group receive that group's keys next (streams.GROUP_PARTS):
-- KEYS[6] gstats  hash: last_seq (sequence number of the last entry read), delivered,
--                 redelivered, processed, retried, dead, missed, lost, guard_skipped, cursor
-- KEYS[7] gflow   hash: flow counters ("out", "busy", "done"; flow.lua)
-- KEYS[8] drain   string: the drain lease; present while a drain job is pending or running
-- KEYS[9] done    zset: entry id -> end of its processed-guard window (ms)
-- KEYS[10] busy   hash: "k:" key -> entry id in flight, "i:" id -> key (ordered groups)
-- KEYS[11] held   zset (all scores 0): "key NL padded id", entries waiting for their key
-- KEYS[12] ready  list: held entry ids whose key came free, delivered before anything else
-- KEYS[13] signal list: the wake signal's token (wake_signal.lua)
-- KEYS[14] listening string: present while a consumer of the group waits on the signal
local K_EVENTS, K_STATS, K_FLOW, K_GROUPS, K_DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_GSTATS, K_GFLOW, K_DRAIN, K_DONE = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local K_BUSY, K_HELD, K_READY, K_SIGNAL, K_LISTENING = KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
--#include common
--#include stream_entries
--#include stream_order
