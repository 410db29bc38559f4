-- Append items to their keys' FIFO queues (or hold them until due), make those keys eligible,
-- and plan the drain job they need. KEYS and ARGV[1..7]: see bucket_keys.lua. Then one of two
-- forms, told apart by how many ARGV follow:
-- plain (one item, no dedupe id, no delay: the common .delay()): ARGV[8] key, ARGV[9] payload,
-- ARGV[10] cost ('' or absent: none);
-- general: ARGV[8] dedupe window ms (0: no producer-side deduplication), then ARGV[9],
-- ARGV[10], ... groups of 6: key, payload, dedupe id ('' for none), delay ms, cost ('' for none:
-- a bucket without bucket_cost), priority tier (0-9; above 0 only on a bucket with priority
-- tiers, bucket_tier_heads.lua)
-- Returns {send_drain, wake_in_ms, status...}: send_drain 1 means "send a drain job now";
-- wake_in_ms >= 0 means "send a drain job with this countdown" (no job is scheduled earlier).
-- Status (bucket_statuses.lua): REFUSED (key full), QUEUED, DROPPED (queued and the key's
-- oldest item dropped), DUPLICATE (refused), DELAYED (held until due). Bounded: O(batch * log K).
-- What a call does not use (dedupe, the delayed set) costs nothing. A plain call for a key with
-- room, on a bucket without priority tiers, is stored in about nine commands and returns before
-- the helpers only the general path needs are defined (bucket_append's: Lua defines a local
-- function where the chunk reaches it); any other plain call (a full key, refused or dropping
-- its oldest; a bucket with tiers) is the general path's one item, in the same call.
-- Why one script, not the twin bucket_enqueue_plain it replaced (issue 31 keeps a twin only
-- where it buys more than 10 % on the producer): a .delay()-shaped call took 152.4 us here
-- against the twin's 145.9 (+4.4 %; the five runs from +1.7 to +8.6 %), 52.3 against 46.9 us
-- inside Redis (+11.3 %), medians of five runs on the shared 2-core machine, each side in the
-- same run (.venv/bin/python bench/script_cost.py bucket_enqueue --against
-- 9bf815e:bucket_enqueue_plain --rounds 40); the general form's own time is unchanged (-0.2 %
-- inside Redis, bucket_enqueue/dedupe --against 9bf815e). At 9bf815e the twin bought 23.5 %
-- over the general form it stood in for (bench/bucket_twin.py there, five runs). What the plain
-- call pays is the general checks: checks of its own, as the twin's, took it to 1.02 times the
-- twin's server time in a trial (1.10 this way) but would send 352 lines, over the line cap.
-- Lost reply: raises (a store: a second run would queue the items twice; pass dedupe ids to make
-- calling again safe)
--#include bucket_keys
--#include clock
--#include tick
--#include wake_listener
--#include bucket_statuses
--#include bucket_cost_rate
--#include bucket_rate
--#include bucket_make_slot
--#include bucket_at_capacity
--#include bucket_limits_at
--#include plan_drain
--#include bucket_plan_drain
local b = bucket_keys(KEYS, ARGV)
-- A plain call's item reads as one group of the general form (A: the groups, from A[first]).
local plain = #ARGV == 9 or #ARGV == 10
local A, first = plain and {ARGV[8], ARGV[9], '', '0', ARGV[10] or '', '0'} or ARGV, plain and 1 or 9
-- Before its first read (as check_keys.lua checks, in fewer lines): a key of another type than
-- bucket_keys.lua names, or a counter it reads or adds to that is not an integer (a stats
-- field; an item's key's head, tail or in_flight), fails it with CORRUPT, nothing written.
local function corrupt(what, v, want) error('CORRUPT ' .. what .. ' holds ' .. v .. ', not ' .. want, 0) end
-- Only the keys it touches ('-': not touched; tests/unit/test_lua_shape.py checks the masks);
-- SKIP: those this call cannot touch (dedupe ids on the plain path; b.urgent without tiers).
local TYPES, SKIP = {z = 'zset', h = 'hash', l = 'list', s = 'string'}, {[17] = plain, [28] = b.priority_bound <= 0}
for i = 1, 28 do local want = not SKIP[i] and TYPES[string.sub('zhhhhh---hh-sszzz-hz----lz-z', i, i)]
  local kind = want and redis.call('TYPE', KEYS[i]).ok
  if kind and kind ~= want and kind ~= 'none' then corrupt(KEYS[i], 'a ' .. kind, 'a ' .. want) end end
local fields, values, stats = {}, {}, redis.call('HGETALL', b.stats)
for i = 2, #stats, 2 do if not string.match(stats[i], '^%-?%d+$') then corrupt(b.stats .. ' field ' .. stats[i - 1], stats[i], 'an integer') end end
local window = plain and 0 or tonumber(ARGV[8])
local count = (#A - first + 1) / 6
-- interval, burst: the rate of the last item's key (the plain path's one key uses it below).
local dedupe, interval, burst, rate_ok = false, nil, nil, true
-- Check every item, and the stored rate of every key an item joins now, before writing.
for i = first, #A, 6 do
  local delay, tier, n = tonumber(A[i + 3]), tonumber(A[i + 5]), #fields
  if not tier or tier < 0 or tier > 9 or tier % 1 ~= 0 or (tier > 0 and b.priority_bound <= 0) then return redis.error_reply('ERR bucket_enqueue: bad priority tier ' .. A[i + 5]) end
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4], fields[n + 5], fields[n + 6] = b.heads, A[i], b.tails, A[i], b.keystats, A[i] .. '\0in_flight'
  -- With priority tiers: the key's tier mask and every tier queue its append may move (those
  -- the mask names, and the call's own), as bucket_tier_heads.lua reads them.
  if b.priority_bound > 0 then
    local mask = redis.call('HGET', b.tails, A[i] .. '\0tiers')
    if mask and not string.match(mask, '^%d+$') then corrupt(b.tails .. ' field ' .. A[i] .. '\0tiers', mask, 'an integer') end
    for t = 1, 9 do if t == tier or bit.band(tonumber(mask or '0'), bit.lshift(1, t)) ~= 0 then
      for _, h in ipairs({b.heads, b.tails}) do fields[#fields + 1], fields[#fields + 2] = h, A[i] .. '\0' .. t end
    end end
  end
  if not delay then return redis.error_reply('ERR bucket_enqueue: bad delay ' .. A[i + 3]) end
  local cost = A[i + 4]
  if cost ~= '' then
    local units, limit = tonumber(cost), select(3, bucket_cost_rate(b, A[i]))
    if not units or units < 0 then return redis.error_reply('ERR bucket_enqueue: bad cost ' .. cost) end
    -- A call one period's budget can never cover (a key's own cost rate may be lower than the
    -- bucket's, which the caller checked already).
    if limit > 0 and units > limit then return redis.error_reply('ERR bucket cost ' .. cost .. ' of key ' .. A[i] .. ' exceeds what its cost rate allows in one period (' .. limit .. ')') end
  end
  if delay <= 0 then interval, burst, rate_ok = bucket_rate(b, A[i]) end
  if not rate_ok then return redis.error_reply('ERR the rate stored for bucket key ' .. A[i] .. ' is malformed; set it again (set_rate)') end
  if A[i + 2] ~= '' then dedupe = true end
end
-- The values read (the plain path's: its key's head, tail and in_flight).
for i = 1, #fields, 2 do
  local v = redis.call('HGET', fields[i], fields[i + 1])
  if v and not string.match(v, '^%-?%d+$') then corrupt(fields[i] .. ' field ' .. fields[i + 1], v, 'an integer') end
  if plain then values[#values + 1] = tonumber(v or '0') end
end
dedupe = dedupe and window > 0
local now = now_ms()

-- The plain call for a key with room (a full one is refused or drops its oldest on the general
-- path) in about nine commands; a bucket with priority tiers keeps tier 0 in sub-queues too.
if plain and b.priority_bound <= 0 and (b.max_depth <= 0 or values[2] - values[1] < b.max_depth) then
  -- Ids need only be unique (the general path's too). HINCRBY answers the new tail; the item
  -- goes at the old one (a key that emptied has no head or tail field: both start again at 0).
  local key, id = A[1], redis.call('HINCRBY', b.stats, 'seq', 1)
  redis.call('HSET', b.items, key .. '\0' .. (redis.call('HINCRBY', b.tails, key, 1) - 1), bucket_make_slot(0, id, now, A[2], tonumber(A[5])))
  -- One folded counter for enqueued and depth (figures.unfold and read_flow.lua read it).
  redis.call('HINCRBY', b.stats, 'enqueued+depth', 1)
  tick(b.flow, 'in', 1, now)
  -- An item into an empty queue is its key's head (b.ages: its offered time). A key not in the
  -- ready set yet joins it unless its calls in flight are at its limit; a key paused until
  -- resumed stays out.
  if values[1] == values[2] then redis.call('ZADD', b.ages, math.floor(now), key) end
  local when = tonumber(redis.call('ZSCORE', b.ready, key))
  if not when and not bucket_at_capacity(b, key) then
    when = math.max((tonumber(redis.call('HGET', b.tat, key) or '0') or 0) - burst * interval, now, bucket_limits_at(b, key, now))
    if when < math.huge then redis.call('ZADD', b.ready, when, key) else when = nil end
  end
  -- A listener waiting on the wake signal looks again (this key may go before what it waits
  -- for). A key that may go now means work now: arm the drain flag unless a job holds it.
  if wake_listener(b.listening, b.signal, b.lease, now) then return {0, -1, QUEUED} end
  if when and when <= now then return {(plan_drain(b.drains, b.wake, b.lease, now, now)), -1, QUEUED} end
  local send, wait = bucket_plan_drain(b, now)
  return {send, wait, QUEUED}
end

--#include forget_expired
--#include bucket_append
local result = {0, -1}
local enqueued, rejected, duplicates, delayed = 0, 0, 0, 0
-- Forget a few expired dedupe ids whenever ids are recorded: bounded work, bounded set.
if dedupe then forget_expired(b.dedupe, now) end

-- Ids for the whole batch in one step (a duplicate leaves a gap: ids need only be unique).
local id = redis.call('HINCRBY', b.stats, 'seq', count) - count
for i = first, #A, 6 do
  local key, payload, dedupe_id, delay, cost, tier = A[i], A[i + 1], A[i + 2], tonumber(A[i + 3]), tonumber(A[i + 4]), tonumber(A[i + 5])
  id = id + 1
  local status
  if dedupe and dedupe_id ~= '' and redis.call('ZSCORE', b.dedupe, dedupe_id) then
    status, duplicates = DUPLICATE, duplicates + 1
  elseif delay > 0 then
    local stamp = cost and (id .. '/' .. string.format('%.17g', cost)) or id
    if tier > 0 then stamp = stamp .. '^' .. tier end
    redis.call('ZADD', b.scheduled, now + delay, stamp .. ' ' .. key .. '\0' .. payload)
    status, delayed = DELAYED, delayed + 1
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
