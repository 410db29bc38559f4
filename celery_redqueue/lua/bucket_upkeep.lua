-- Bring a bucket up to date before a poll hands anything out: bucket_dequeue replies UPKEEP,
-- and its caller runs this and polls again, when delayed items came due, a key's head must be
-- dealt with or a new minute began (rare steps, kept out of the poll's script so that it
-- ships less).
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] a key whose head bucket_dequeue could not release ('' for none), ARGV[9]
-- processed-guard (1|0): that head is unreadable (dead-lettered) or, with the guard, its id
-- completed already (skipped: counted processed, not applied twice, and it does not use up its
-- key's rate); a head that is neither stays.
-- The release counts of the noisy-neighbour figures roll over when the minute changed:
-- b.releases counts this minute's releases per key (bucket_reserve.lua), b.releases_prev the
-- previous minute's (renamed, not copied; both hold only keys that released lately). The
-- bucket's totals need no counter of their own: every release is one `receives`, so b.stats
-- keeps `releases_base`, the receives when this minute began, and `releases_prev`, the
-- previous minute's total.
-- Delayed items due now join the tail of their key's queue, in due order (at most 100 per
-- call); a malformed one is dead-lettered (counted as enqueued and dead). A debounced call's
-- record (b.debounce) is forgotten when it is the call queued, so the id's next call starts a
-- new window.
-- Reply: malformed, the entries dead-lettered because they could not be read.
-- Bounded: O(100 * log K) (plus one rename a minute).
-- Lost reply: safe to run twice: it acts on a key's head only if that head is unreadable or
-- completed (a second run finds the next head, and leaves it unless it is so too), moves only
-- what is due when it runs (an item leaves the delayed set in the step that queues it) and
-- rolls a minute once; the lost reply's malformed count is lost with it (the entries are in
-- the dead letters)
--#include bucket_keys
--#include clock
--#include bucket_statuses
--#include bucket_parse_slot
--#include bucket_make_slot
--#include bucket_head
--#include bucket_take_head
--#include bucket_bury
--#include bucket_append
--#include check_keys
--#include check_fields
--#include bucket_unready
local b = bucket_keys(KEYS, ARGV)
local key, guard = ARGV[8] or '', ARGV[9] == '1'
local now = now_ms()
local malformed = 0
-- Every key it may write and the per-key numbers it may add to, before its first write
-- (check_keys.lua, check_fields.lua: CORRUPT, nothing written).
check_keys({b.urgent, 'zset', b.ready, 'zset', b.items, 'hash', b.heads, 'hash', b.tails, 'hash', b.keystats,
  'hash', b.dead, 'list', b.done, 'zset', b.releases, 'zset', b.releases_prev, 'zset',
  b.scheduled, 'zset', b.ages, 'zset', b.tat, 'hash', b.rates, 'hash', b.paused, 'zset',
  b.inflight, 'zset', b.debounce, 'hash'}, b.stats)
local fields = {}
local function touches(k)
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = b.heads, k, b.tails, k
  for _, c in ipairs({'processed', 'dead', 'in_flight'}) do
    fields[#fields + 1], fields[#fields + 2] = b.keystats, k .. '\0' .. c
  end
end
-- Every delayed entry is read before anything is written: Redis keeps the writes of a script
-- that fails half-way.
local due = redis.call('ZRANGEBYSCORE', b.scheduled, '-inf', now, 'LIMIT', 0, 100)
local parsed = {}
for i, entry in ipairs(due) do
  -- "id key NUL payload", or "id/cost key NUL payload" for a call with a cost; "^tier"
  -- ends the stamp of a call of a priority tier above 0.
  local id, cost, item_tier, item_key, payload = string.match(entry, '^(%d+)/?([%d.]*)%^?(%d?) ([^%z]*)%z(.*)$')
  -- A debounced call (bucket_debounce.lua) names its dedupe id, whose record it ends.
  local hex = payload and string.match(payload, '^%zdebounced:%d+:(%x*)%z')
  local dedupe_id = hex and string.gsub(hex, '%x%x', function(h) return string.char(tonumber(h, 16)) end)
  parsed[i] = {id = id, key = item_key, payload = payload, cost = tonumber(cost or ''), dedupe_id = dedupe_id, tier = tonumber(item_tier or '') or 0}
  if id then touches(item_key) end
end
if key ~= '' then touches(key) end
check_fields(fields)

if key ~= '' then
  local head, slot, tier = bucket_head(b, key, now)
  local receives, id = bucket_parse_slot(slot)
  local done = receives and guard and redis.call('ZSCORE', b.done, id)
  if not slot and (tonumber(redis.call('HGET', b.tails, key) or '0') or 0) <= head then
    -- A ready member with no queue (another program's, or a corruption's): no call to
    -- dead-letter or count; it leaves the ready set.
    bucket_unready(b, key)
  elseif not receives or done then
    local remaining = bucket_take_head(b, key, head, tier)
    if remaining <= 0 then bucket_unready(b, key) end
    if done then
      redis.call('HINCRBY', b.stats, 'processed', 1)
      redis.call('HINCRBY', b.stats, 'guard_skipped', 1)
      redis.call('HINCRBY', b.keystats, key .. '\0processed', 1)
    else
      bucket_bury(b, key, slot, 'malformed entry: unreadable slot', now)
      malformed = malformed + 1
    end
  end
end

local minute = math.floor(now / 60000)
local current = tonumber(redis.call('HGET', b.stats, 'releases_minute') or '-1')
if current ~= minute then
  local counts = redis.call('HMGET', b.stats, 'receives', 'releases_base')
  local receives = tonumber(counts[1] or '0') or 0
  local last = receives - (tonumber(counts[2] or '0') or 0)
  redis.call('DEL', b.releases_prev)
  if current == minute - 1 and redis.call('EXISTS', b.releases) == 1 then
    redis.call('RENAME', b.releases, b.releases_prev)
  else
    redis.call('DEL', b.releases)
    last = 0
  end
  redis.call('HSET', b.stats, 'releases_minute', minute, 'releases_prev', last,
             'releases_base', receives)
end

for i, entry in ipairs(due) do
  redis.call('ZREM', b.scheduled, entry)
  local p = parsed[i]
  if p.dedupe_id and select(2, string.match(redis.call('HGET', b.debounce, p.dedupe_id) or '', '^(%d+) (.*)$')) == entry then
    redis.call('HDEL', b.debounce, p.dedupe_id)
  end
  if not p.id then
    bucket_bury(b, '', entry, 'malformed entry: unreadable delayed item', now)
    redis.call('HINCRBY', b.stats, 'enqueued', 1)
    malformed = malformed + 1
  elseif bucket_append(b, p.key, bucket_make_slot(0, p.id, now, p.payload, p.cost, nil, p.tier), now) == REFUSED then
    redis.call('HINCRBY', b.stats, 'rejected', 1)
  else
    redis.call('HINCRBY', b.stats, 'enqueued', 1)
  end
end
if #due > 0 then redis.call('HINCRBY', b.stats, 'delayed', -#due) end
return malformed
