-- Read what the backpressure figures need, in one step on the structure's own node (a
-- pipeline cannot carry TIME on Redis Cluster, and the clock must be that node's anyway).
-- KEYS[1] stats  hash: counters
-- KEYS[2] flow   hash: per-second ring counters for the last minute
-- KEYS[3] ages   zset: member -> when (ms) it was offered; the lowest is the oldest waiting
-- Returns {stats as a flat list, flow as a flat list, oldest ms or '', now ms}. Bounded: the
-- stats hash has a few dozen fields and the ring at most 60 slots per kind.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
return {
  redis.call('HGETALL', KEYS[1]),
  redis.call('HGETALL', KEYS[2]),
  oldest[2] or '',
  string.format('%.17g', now),
}
