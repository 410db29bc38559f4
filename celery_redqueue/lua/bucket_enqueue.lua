-- Append items to their keys' FIFO queues (or hold them until due), make those keys eligible,
-- and plan the drain job they need. KEYS and ARGV[1..7]: see bucket_keys.lua.
-- ARGV[8] dedupe window ms (0: no producer-side deduplication)
-- ARGV[9], ARGV[10], ... groups of 6: key, payload, dedupe id ('' for none), delay ms, cost
-- ('' for none: a bucket without bucket_cost), priority tier (0-9; above 0 only on a bucket with
-- priority tiers, bucket_tier_heads.lua)
-- Returns {send_drain, wake_in_ms, status...}: send_drain 1 means "send a drain job now";
-- wake_in_ms >= 0 means "send a drain job with this countdown" (no job is scheduled earlier).
-- Status (bucket_statuses.lua): REFUSED (key full), QUEUED, DROPPED (queued and the key's
-- oldest item dropped), DUPLICATE (refused), DELAYED (held until due). Bounded: O(batch * log K).
-- What a call does not use (dedupe, the delayed set) costs nothing.
-- Lost reply: raises (a store: a second run would queue the items twice; pass dedupe ids to make
-- calling again safe)
--#include bucket_keys
--#include clock
--#include tick
--#include forget_expired
--#include wake_listener
--#include bucket_statuses
--#include bucket_cost_rate
--#include bucket_rate
--#include bucket_make_slot
--#include bucket_append
--#include bucket_plan_drain
local b = bucket_keys(KEYS, ARGV)
-- Before its first read (as check_keys.lua checks, in fewer lines): a key of another type than
-- bucket_keys.lua names, or a counter it reads or adds to that is not an integer (a stats
-- field; an item's key's head, tail or in_flight), fails it with CORRUPT, nothing written.
local function corrupt(what, v, want) error('CORRUPT ' .. what .. ' holds ' .. v .. ', not ' .. want, 0) end
-- Only the keys it touches ('-': not touched; tests/unit/test_lua_shape.py checks the masks).
local TYPES = {z = 'zset', h = 'hash', l = 'list', s = 'string'}
for i = 1, 28 do local want = TYPES[string.sub('zhhhhh---hh-sszzz-hz----lz-z', i, i)]
  local kind = want and redis.call('TYPE', KEYS[i]).ok
  if kind and kind ~= want and kind ~= 'none' then corrupt(KEYS[i], 'a ' .. kind, 'a ' .. want) end end
local fields, stats = {}, redis.call('HGETALL', b.stats)
for i = 2, #stats, 2 do if not string.match(stats[i], '^%-?%d+$') then corrupt(b.stats .. ' field ' .. stats[i - 1], stats[i], 'an integer') end end
local window = tonumber(ARGV[8])
local count = (#ARGV - 8) / 6
local dedupe = false
-- Check every item, and the stored rate of every key an item joins now, before writing.
for i = 9, #ARGV, 6 do
  local delay = tonumber(ARGV[i + 3])
  local tier = tonumber(ARGV[i + 5])
  if not tier or tier < 0 or tier > 9 or tier % 1 ~= 0 or (tier > 0 and b.priority_bound <= 0) then return redis.error_reply('ERR bucket_enqueue: bad priority tier ' .. ARGV[i + 5]) end
  for _, f in ipairs({b.heads, ARGV[i], b.tails, ARGV[i], b.keystats, ARGV[i] .. '\0in_flight'}) do fields[#fields + 1] = f end
  -- With priority tiers: the key's tier mask and every tier queue its append may move (those
  -- the mask names, and the call's own), as bucket_tier_heads.lua reads them.
  if b.priority_bound > 0 then
    local mask = redis.call('HGET', b.tails, ARGV[i] .. '\0tiers')
    if mask and not string.match(mask, '^%d+$') then corrupt(b.tails .. ' field ' .. ARGV[i] .. '\0tiers', mask, 'an integer') end
    for t = 1, 9 do if t == tier or bit.band(tonumber(mask or '0'), bit.lshift(1, t)) ~= 0 then
      for _, h in ipairs({b.heads, b.tails}) do fields[#fields + 1], fields[#fields + 2] = h, ARGV[i] .. '\0' .. t end
    end end
  end
  if not delay then return redis.error_reply('ERR bucket_enqueue: bad delay ' .. ARGV[i + 3]) end
  local cost = ARGV[i + 4]
  if cost ~= '' then
    local units, limit = tonumber(cost), select(3, bucket_cost_rate(b, ARGV[i]))
    if not units or units < 0 then return redis.error_reply('ERR bucket_enqueue: bad cost ' .. cost) end
    -- A call one period's budget can never cover (a key's own cost rate may be lower than the
    -- bucket's, which the caller checked already).
    if limit > 0 and units > limit then
      return redis.error_reply('ERR bucket cost ' .. cost .. ' of key ' .. ARGV[i] .. ' exceeds what its cost rate allows in one period (' .. limit .. ')')
    end
  end
  if delay <= 0 and not select(3, bucket_rate(b, ARGV[i])) then
    return redis.error_reply('ERR the rate stored for bucket key ' .. ARGV[i] .. ' is malformed; set it again (set_rate)')
  end
  if ARGV[i + 2] ~= '' then dedupe = true end
end
for i = 1, #fields, 2 do
  local v = redis.call('HGET', fields[i], fields[i + 1])
  if v and not string.match(v, '^%-?%d+$') then corrupt(fields[i] .. ' field ' .. fields[i + 1], v, 'an integer') end
end
dedupe = dedupe and window > 0

local now = now_ms()
local result = {0, -1}
local enqueued, rejected, duplicates, delayed = 0, 0, 0, 0
-- Forget a few expired dedupe ids whenever ids are recorded: bounded work, bounded set.
if dedupe then forget_expired(b.dedupe, now) end

-- Ids for the whole batch in one step (a duplicate leaves a gap: ids need only be unique).
local id = redis.call('HINCRBY', b.stats, 'seq', count) - count
for i = 9, #ARGV, 6 do
  local key, payload, dedupe_id, delay = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local cost, tier = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  id = id + 1
  local status
  if dedupe and dedupe_id ~= '' and redis.call('ZSCORE', b.dedupe, dedupe_id) then
    status = DUPLICATE
    duplicates = duplicates + 1
  elseif delay > 0 then
    local stamp = cost and (id .. '/' .. string.format('%.17g', cost)) or id
    if tier > 0 then stamp = stamp .. '^' .. tier end
    redis.call('ZADD', b.scheduled, now + delay, stamp .. ' ' .. key .. '\0' .. payload)
    delayed = delayed + 1
    status = DELAYED
  else
    status = bucket_append(b, key, bucket_make_slot(0, id, now, payload, cost, nil, tier), now)
    if status == REFUSED then rejected = rejected + 1 else enqueued = enqueued + 1 end
  end
  -- Remember the dedupe id only for an item that was taken: a refused item may be retried.
  if dedupe and dedupe_id ~= '' and status ~= REFUSED and status ~= DUPLICATE then redis.call('ZADD', b.dedupe, now + window, dedupe_id) end
  result[#result + 1] = status
end

-- One HINCRBY per counter that moved.
for field, n in pairs({enqueued = enqueued, rejected = rejected, duplicates = duplicates, delayed = delayed}) do if n > 0 then redis.call('HINCRBY', b.stats, field, n) end end
tick(b.flow, 'in', enqueued + rejected + duplicates, now)

-- One wake mechanism for immediate and delayed items (plan_drain.lua): a key
-- eligible now needs a drain job unless one holds the flag; later work needs one scheduled
-- unless one is scheduled no later.
-- A listener waiting on the wake signal (wake_listener.lua) is woken and takes the items itself;
-- for items not due yet its poll answers LATER and it plans their wake-up itself (no job here).
if not (enqueued + delayed > 0 and wake_listener(b.listening, b.signal, b.lease, now)) then result[1], result[2] = bucket_plan_drain(b, now) end
return result
