-- A stream's keys by name, as one table `s` the stream helpers take (spliced in at
-- "--#include stream_keys"); `keys` is a script's KEYS. With `group`, the group's keys too
-- (a script that acts for one group receives them after the stream's).
-- Every stream script receives the stream's KEYS first (see streams.PARTS in streams.py):
-- KEYS[1] events  stream: entries with fields d (payload), n (sequence number), k (partition
--                 key, optional), to (the one group a requeued dead letter is for, optional)
-- KEYS[2] stats   hash: seq (last sequence number given), published, requeued, trimmed
-- KEYS[3] flow    hash: flow counters ("in"; tick.lua)
-- KEYS[4] groups  hash: group -> when (ms) it was created
-- KEYS[5] dead    list: dead letters, "json NL payload"
-- Scripts that act for one group receive that group's keys next (streams.GROUP_PARTS):
-- KEYS[6] gstats  hash: last_seq (sequence number of the last entry read), delivered,
--                 redelivered, processed, retried, dead, missed, lost, guard_skipped, cursor
-- KEYS[7] gflow   hash: flow counters ("out", "busy", "done"; tick.lua)
-- KEYS[8] drains  string: the group's drain flag; present while a drain job is sent or running
-- KEYS[9] done    zset: entry id -> end of its processed-guard window (ms)
-- KEYS[10] busy   hash: "k:" key -> entry id in flight, "i:" id -> key (ordered groups)
-- KEYS[11] held   zset (all scores 0): "key NL padded id", entries waiting for their key
-- KEYS[12] ready  list: held entry ids whose key came free, delivered before anything else
-- KEYS[13] signal list: the wake signal's token (wake_listener.lua)
-- KEYS[14] listening zset: listener id -> until when (ms) it waits on the group's signal
local function stream_keys(keys, group)
  local s = {events = keys[1], stats = keys[2], flow = keys[3], groups = keys[4], dead = keys[5]}
  if group then
    s.gstats, s.gflow, s.drains, s.done, s.busy = keys[6], keys[7], keys[8], keys[9], keys[10]
    s.held, s.ready, s.signal, s.listening = keys[11], keys[12], keys[13], keys[14]
  end
  return s
end
