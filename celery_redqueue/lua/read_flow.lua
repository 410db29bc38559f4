-- Read what the backpressure figures need, in one step on the structure's own node (a
-- pipeline cannot carry TIME on Redis Cluster, and the clock must be that node's anyway).
-- KEYS[1] stats  hash: counters
-- KEYS[2] flow   hash: per-second and per-minute counters (see tick.lua)
-- KEYS[3] ages   zset: member -> when (ms) it was offered; the lowest is the oldest waiting
-- ARGV[1] the stats field that holds the depth, or '' to record nothing
-- Reply: {stats as a flat list, flow as a flat list, oldest ms or '', now ms}. Bounded: the
-- stats hash has a few dozen fields and the flow hash ~180 per kind (pruned, see roll_flow.lua).
-- Depth is a level, not a flow, so no script that changes it can tick it; instead every reading
-- keeps the deepest depth seen this minute in the minute's field ("depth:m<minute>"), so the
-- hour's depth curve has a point for each minute in which anyone (a scrape, the dashboard, the
-- CLI) looked. The depth is the stats field ARGV[1] plus every folded field that names it
-- ("offered+accepted+depth": one HINCRBY that stands for several counters). That HSET is
-- the only write, and it is optional: at maxmemory (noeviction) Redis refuses it, and the
-- figures must still be readable then, so its error is ignored.
-- Lost reply: safe to run twice (reads; rolling old seconds into minutes is the same done twice)
--#include clock
--#include roll_flow
local depth_field = ARGV[1]
local now = now_ms()
local stats = redis.call('HGETALL', KEYS[1])
local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if depth_field ~= '' then
  local depth = 0
  for i = 1, #stats, 2 do
    for name in string.gmatch(stats[i], '[^+]+') do
      if name == depth_field then depth = depth + (tonumber(stats[i + 1]) or 0) end
    end
  end
  local field = 'depth:m' .. math.floor(now / 60000)
  local old = tonumber(redis.call('HGET', KEYS[2], field))
  if not old then
    redis.pcall('HSET', KEYS[2], field, depth)
    pcall(roll_flow, KEYS[2], math.floor(now / 60000) - 1)
  elseif old < depth then
    redis.pcall('HSET', KEYS[2], field, depth)
  end
end
return {
  stats,
  redis.call('HGETALL', KEYS[2]),
  oldest[2] or '',
  string.format('%.17g', now),
}
