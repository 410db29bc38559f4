-- Bring a bucket up to date before a poll hands anything out: bucket_dequeue replies UPKEEP,
-- and its caller runs this and polls again, when delayed items came due or a new minute began
-- (rare steps, kept out of the poll's script so that it ships less).
-- Delayed items due now join the tail of their key's queue, in due order (at most 100 per
-- call); a malformed one is dead-lettered (counted as enqueued and dead).
-- The release counts of the noisy-neighbour figures roll over when the minute changed:
-- K_RELEASES counts this minute's releases per key, K_RELEASES_PREV the previous minute's
-- (renamed, not copied; both hold only keys that released lately). The bucket's totals need no
-- counter of their own: every release is one `receives`, so K_STATS keeps `releases_base`, the
-- receives when this minute began, and `releases_prev`, the previous minute's total.
-- KEYS[1..26]: the bucket's keys (bucket_common.lua names each).
-- ARGV[1..7]: the bucket's settings (bucket_common.lua).
-- Reply: malformed, the delayed items dead-lettered because they could not be read.
-- Bounded: O(100 * log K) (plus one rename a minute).
-- Lost reply: safe to run twice: it moves only what is due when it runs (an item leaves the
-- delayed set in the step that queues it) and rolls a minute once; the lost reply's malformed
-- count is lost with it (the items are in the dead letters)
--#include bucket_common
local now = now_ms()

local minute = math.floor(now / 60000)
local current = tonumber(redis.call('HGET', K_STATS, 'releases_minute') or '-1')
if current ~= minute then
  local counts = redis.call('HMGET', K_STATS, 'receives', 'releases_base')
  local receives = tonumber(counts[1] or '0') or 0
  local last = receives - (tonumber(counts[2] or '0') or 0)
  redis.call('DEL', K_RELEASES_PREV)
  if current == minute - 1 and redis.call('EXISTS', K_RELEASES) == 1 then
    redis.call('RENAME', K_RELEASES, K_RELEASES_PREV)
  else
    redis.call('DEL', K_RELEASES)
    last = 0
  end
  redis.call('HSET', K_STATS, 'releases_minute', minute, 'releases_prev', last,
             'releases_base', receives)
end

-- Every entry is read before anything is written: Redis keeps the writes of a script that
-- fails half-way.
local due = redis.call('ZRANGEBYSCORE', K_SCHEDULED, '-inf', now, 'LIMIT', 0, 100)
local parsed, malformed = {}, 0
for i, entry in ipairs(due) do
  -- "id key NUL payload", or "id/cost key NUL payload" for a call with a cost.
  local id, cost, key, payload = string.match(entry, '^(%d+)/?([%d.]*) ([^%z]*)%z(.*)$')
  parsed[i] = {id = id, key = key, payload = payload, cost = tonumber(cost or '')}
end
for i, entry in ipairs(due) do
  redis.call('ZREM', K_SCHEDULED, entry)
  local p = parsed[i]
  if not p.id then
    bury('', entry, 'malformed entry: unreadable delayed item', now)
    redis.call('HINCRBY', K_STATS, 'enqueued', 1)
    malformed = malformed + 1
  elseif append(p.key, make_slot(0, p.id, now, p.payload, p.cost), now) == 0 then
    redis.call('HINCRBY', K_STATS, 'rejected', 1)
  else
    redis.call('HINCRBY', K_STATS, 'enqueued', 1)
  end
end
if #due > 0 then redis.call('HINCRBY', K_STATS, 'delayed', -#due) end
return malformed
