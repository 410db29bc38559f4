-- Read what the backpressure figures need, in one step on the structure's own node (a
-- pipeline cannot carry TIME on Redis Cluster, and the clock must be that node's anyway).
-- KEYS[1] stats  hash: counters
-- KEYS[2] flow   hash: per-second and per-minute ring counters (see tick in flow.lua)
-- KEYS[3] ages   zset: member -> when (ms) it was offered; the lowest is the oldest waiting
-- ARGV[1] the stats field that holds the depth, or '' to record nothing
-- Reply: {stats as a flat list, flow as a flat list, oldest ms or '', now ms}. Bounded: the
-- stats hash has a few dozen fields and each ring at most 60 slots per kind.
-- Depth is a level, not a flow, so no script that changes it can tick it; instead every reading
-- keeps the deepest depth seen this minute in the minute ring ("depth:m<minute % 60>"), so the
-- hour's depth curve has a point for each minute in which anyone (a scrape, the dashboard, the
-- CLI) looked. That one HSET is the only write, and it is optional: at maxmemory (noeviction)
-- Redis refuses it, and the figures must still be readable then, so its error is ignored.
--#include clock
local depth_field = ARGV[1]
local now = now_ms()
local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if depth_field ~= '' then
  local depth = tonumber(redis.call('HGET', KEYS[1], depth_field) or '0')
  local minute = math.floor(now / 60000)
  local field = 'depth:m' .. (minute % 60)
  local old = redis.call('HGET', KEYS[2], field)
  if old then
    local old_minute, old_depth = string.match(old, '^(%d+) (%S+)$')
    if tonumber(old_minute) == minute and tonumber(old_depth) > depth then depth = old_depth end
  end
  redis.pcall('HSET', KEYS[2], field, minute .. ' ' .. depth)
end
return {
  redis.call('HGETALL', KEYS[1]),
  redis.call('HGETALL', KEYS[2]),
  oldest[2] or '',
  string.format('%.17g', now),
}
