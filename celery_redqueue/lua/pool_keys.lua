-- A pool's keys by name and its settings, as one table the pool helpers take (spliced in at
-- "--#include pool_keys"): `keys` is a script's KEYS, `argv` its ARGV, whose first four are the
-- settings every pool script receives. Every pool script receives these KEYS in this order (see
-- PARTS in pool.py), except pool_add (the first thirteen) and the scripts whose `-- Parts:` line
-- names their own (they name their keys themselves):
-- KEYS[1] items           zset: member -> score (lowest popped first; sample evicts the highest)
-- KEYS[2] counts          hash: member -> merged calls (coalescing pools; absent: 1)
-- KEYS[3] stats           hash: counters; `seq` the last entry id taken (pool_take_ids.lua)
-- KEYS[4] drains          string: number of drain jobs pending; absent when none is
-- KEYS[5] receives        hash: member -> times handed out so far (returned entries only)
-- KEYS[6] ages            zset: lowest score = when (ms) the oldest waiting entry arrived:
--                         arrival slot -> its first arrival (coalescing pools: member -> when)
-- KEYS[7] arrivals        hash: arrival slot -> entries waiting that arrived in it (not
--                         coalescing: an entry's id carries its arrival, so no index per entry)
-- KEYS[8] flow            hash: per-second and per-minute flow counters (tick.lua)
-- KEYS[9] scheduled       zset: "id:score:payload" -> due time (ms)
-- KEYS[10] dedupe         zset: dedupe id -> end of its window (ms)
-- KEYS[11] wake           string: when (ms) a sleeping drain job wakes up
-- KEYS[12] signal         list: the wake signal's token (wake_listener.lua)
-- KEYS[13] listening      zset: listener id -> until when (ms) it waits on the signal
-- KEYS[14] inflight       zset: batch id -> deadline (ms)
-- KEYS[15] inflight_calls hash: batch id -> calls in the batch
-- KEYS[16] inflight_items hash: batch id -> its entries (pool_unpack_batch.lua)
-- KEYS[17] dead           list: dead letters, "json NL payload"
-- KEYS[18] done           zset: entry id -> end of its processed-guard window (ms)
-- KEYS[19] calls          hash: call id -> what it did (record_call.lua: re-sent acks)
-- KEYS[20] calls_at       zset: call id -> when its record expires (ms)
-- KEYS[21] debounce       hash: dedupe id -> "<first call ms> <its held member>" (pool_debounce.lua)
-- ARGV[1] capacity, ARGV[2] policy (sample|newest|reject), ARGV[3] coalesce (1|0),
-- ARGV[4] drain lease ms (see claim_drain.lua).
local function pool_keys(keys, argv)
  return {
    items = keys[1], counts = keys[2], stats = keys[3], drains = keys[4], receives = keys[5],
    ages = keys[6], arrivals = keys[7], flow = keys[8], scheduled = keys[9], dedupe = keys[10],
    wake = keys[11], signal = keys[12], listening = keys[13], inflight = keys[14],
    inflight_calls = keys[15], inflight_items = keys[16], dead = keys[17], done = keys[18],
    calls = keys[19], calls_at = keys[20], debounce = keys[21],
    capacity = tonumber(argv[1]), policy = argv[2], coalesce = argv[3] == '1', lease = argv[4],
  }
end
