-- The bucket's keys and settings as one table, `b`, the first parameter of every bucket helper.
-- Every bucket script receives the same KEYS (bucket.PARTS in bucket.py) and ARGV[1..7]
-- (the settings, from LeakyBucket._script_head); its own ARGV start at 8.
-- KEYS[1] ready      zset: key -> time (ms) since which the key may release its head item
-- KEYS[2] tat        hash: key -> theoretical arrival time (ms) of its next item (GCRA); also
--                    "key NUL cost" (its cost schedule: "tat mark", bucket_cost_tat.lua) and
--                    "NUL total" (the total rate's tat)
-- KEYS[3] rates      hash: key -> "interval_ms burst"; "key NUL cost" -> "interval burst max"
-- KEYS[4] items      hash: key NUL position -> slot (bucket_parse_slot.lua)
-- KEYS[5] heads      hash: key -> position of its head item
-- KEYS[6] tails      hash: key -> position after its last item
-- KEYS[7] inflight   zset: reservation id -> deadline (ms)
-- KEYS[8] res_keys   hash: reservation id -> key
-- KEYS[9] res_items  hash: reservation id -> slot
-- KEYS[10] stats     hash: counters (seq, enqueued, rejected, evicted, processed, dead, ...)
-- KEYS[11] keystats  hash: key NUL counter -> n (in_flight, processed, dead per key)
-- KEYS[12] dead      list: dead letters, "json NL payload"
-- KEYS[13] drains    string: number of drain jobs pending; absent when none is
-- KEYS[14] wake      string: when (ms) the sleeping drain job will wake up
-- KEYS[15] ages      zset: key -> when (ms) its head item was offered (oldest waiting item)
-- KEYS[16] scheduled zset: "id key NUL payload" -> due time (ms) of a delayed item
-- KEYS[17] dedupe    zset: dedupe id -> end of its window (ms)
-- KEYS[18] done      zset: item id -> end of its processed-guard window (ms)
-- KEYS[19] flow      hash: per-second and per-minute counters (tick.lua)
-- KEYS[20] paused    zset: key -> until when (ms, inf: until resumed) it releases nothing
-- KEYS[21] releases  zset: key -> releases in the current minute (noisy-neighbour figures)
-- KEYS[22] releases_prev zset: the same for the previous minute
-- KEYS[23] calls     hash: call id -> what it did (record_call.lua: re-sent polls, settles)
-- KEYS[24] calls_at  zset: call id -> when its record expires (ms)
-- KEYS[25] signal    list: the wake signal's token (wake_listener.lua)
-- KEYS[26] listening zset: listener id -> until when (ms) it waits on the signal
-- KEYS[27] debounce  hash: dedupe id -> "first ms, space, its held member of scheduled"
--                    (bucket_debounce.lua; bucket_upkeep.lua forgets it when the call is due)
-- KEYS[28] urgent    zset: key -> band(tier) + ready score, a key in b.ready whose highest
--                    priority tier is above 0 (bucket_tier_heads.lua)
-- ARGV[1] default interval ms, [2] default burst, [3] limits: "concurrency" alone (0: none;
-- 1: the ordered bucket), or "concurrency cost_interval cost_burst cost_max total_interval
-- total_burst priority_bound" (intervals in ms per unit and per call, 0: no such limit;
-- cost_max: the largest cost one period allows; priority_bound: ms a lower tier waits at most
-- beside a higher one, 0: no priority tiers, bucket_tier_heads.lua), [4] max depth per key (0: unbounded), [5] overflow
-- (reject|drop_oldest), [6] drain lease ms (plan_drain.lua), [7] max receives.
-- Key names never hold NUL, so no field of a per-key hash clashes.
local function bucket_keys(keys, argv)
  local v = {}
  for part in string.gmatch(argv[3] or '', '%S+') do v[#v + 1] = tonumber(part) or 0 end
  return {
    ready = keys[1], tat = keys[2], rates = keys[3], items = keys[4], heads = keys[5],
    tails = keys[6], inflight = keys[7], res_keys = keys[8], res_items = keys[9],
    stats = keys[10], keystats = keys[11], dead = keys[12], drains = keys[13], wake = keys[14],
    ages = keys[15], scheduled = keys[16], dedupe = keys[17], done = keys[18], flow = keys[19],
    paused = keys[20], releases = keys[21], releases_prev = keys[22], calls = keys[23],
    calls_at = keys[24], signal = keys[25], listening = keys[26], debounce = keys[27],
    urgent = keys[28],
    interval = tonumber(argv[1]), burst = tonumber(argv[2]), concurrency = v[1] or 0,
    cost_interval = v[2] or 0, cost_burst = v[3] or 0, cost_max = v[4] or 0,
    total_interval = v[5] or 0, total_burst = v[6] or 0, priority_bound = v[7] or 0, max_depth = tonumber(argv[4]),
    overflow = argv[5], lease = tonumber(argv[6]), max_receives = tonumber(argv[7]),
  }
end
