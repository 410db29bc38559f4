-- Settle one reservation: commit it, put it back to retry later (after a delay), put it back
-- and pause its key (backoff: an upstream's 429), or bury it.
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] reservation id, ARGV[9] action: commit | retry | backoff | dead
-- ARGV[10] retry, backoff: delay ms before the key may release again; dead: the error text
-- ARGV[11] processed-guard window ms (commit; 0: off), ARGV[12] seconds the body took
-- ARGV[13] the call's actual cost as the body reported it ('' when it did not): the key's cost
-- schedule is corrected by (actual - charged), a refund only while the call is the key's
-- latest release (bucket_correct_cost.lua). A backoff that reported none refunds the charge
-- (the upstream refused the call); its receive is not counted, so it is never dead-lettered
-- for backing off.
-- Reply: {held, send_drain}. held NOT_HELD (0): the reservation is not (or no longer) held (a
-- late commit is counted as `late`); SETTLED (1); ALREADY_SETTLED (2): this settle was applied
-- already (a re-send). send_drain 1: the drain flag was armed here, the caller should send a
-- drain job. A commit of a reservation the reaper took back still records the item's id for
-- the processed-guard, so its returned copy is skipped rather than applied twice.
-- Lost reply: safe to run twice: the settle is recorded (record_call.lua) under the reservation
-- id, and a second run replies "already done" (held 2) and changes nothing.
--#include bucket_keys
--#include clock
--#include tick
--#include plan_drain
--#include record_call
--#include recorded
--#include forget_expired
--#include bucket_parse_slot
--#include bucket_make_slot
--#include bucket_take_reservation
--#include bucket_correct_cost
--#include bucket_push_head
--#include bucket_eligible_at
--#include bucket_concurrency
--#include bucket_make_eligible
--#include bucket_bury
--#include bucket_ready
local NOT_HELD, SETTLED, ALREADY_SETTLED = 0, 1, 2
local b = bucket_keys(KEYS, ARGV)
local reservation, action, detail = ARGV[8], ARGV[9], ARGV[10]
local processed_guard_ms, busy, actual = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13] or '')
if action ~= 'commit' and action ~= 'retry' and action ~= 'dead' and action ~= 'backoff' then
  return redis.error_reply('ERR bucket_settle: bad action ' .. tostring(action))
end
if (action == 'retry' or action == 'backoff') and not tonumber(detail) then
  return redis.error_reply('ERR bucket_settle: bad delay ' .. tostring(detail))
end
local now = now_ms()
-- Before its first write (as check_keys.lua checks, in fewer lines): a key of another type than
-- bucket_keys.lua names, or a counter it adds to that is not an integer (a stats field; the
-- settled key's head, tail and counters), fails it with CORRUPT, nothing written.
-- Only the keys it touches ('-': not touched; tests/unit/test_lua_shape.py checks the masks).
local TYPES = {z = 'zset', h = 'hash', l = 'list', s = 'string'} for i = 1, 28 do local want = TYPES[string.sub('zhhhhhzhhhhlssz--zhz--hz---z', i, i)] local kind = want and redis.call('TYPE', KEYS[i]).ok if kind and kind ~= want and kind ~= 'none' then error('CORRUPT ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a ' .. want, 0) end end
local function integer(h, f)
  local v = redis.call('HGET', h, f) if v and not string.match(v, '^%-?%d+$') then error('CORRUPT ' .. h .. ' field ' .. f .. ' holds ' .. v .. ', not an integer', 0) end
end
local stats = redis.call('HGETALL', b.stats) for i = 2, #stats, 2 do if not string.match(stats[i], '^%-?%d+$') then error('CORRUPT ' .. b.stats .. ' field ' .. stats[i - 1] .. ' holds ' .. stats[i] .. ', not an integer', 0) end end
local held_key = redis.call('HGET', b.res_keys, reservation)
for _, f in ipairs(held_key and {'in_flight', 'processed', 'backoffs', 'dead'} or {}) do integer(b.keystats, held_key .. '\0' .. f) end
if held_key then integer(b.heads, held_key) integer(b.tails, held_key) end
-- With priority tiers, a call put back goes to its tier's queue (bucket_push_head.lua).
local held_tier = held_key and b.priority_bound > 0 and select(7, bucket_parse_slot(redis.call('HGET', b.res_items, reservation))) or 0
if held_tier > 0 then
  integer(b.heads, held_key .. '\0' .. held_tier) integer(b.tails, held_key .. '\0' .. held_tier) integer(b.tails, held_key .. '\0tiers')
end
if action == 'commit' and processed_guard_ms > 0 then
  forget_expired(b.done, now)
  redis.call('ZADD', b.done, now + processed_guard_ms, string.match(reservation, '^(%d+)'))
end

local key, slot = bucket_take_reservation(b, reservation)
if not key then
  if recorded(b.calls, 'settle:' .. reservation) then return {ALREADY_SETTLED, 0} end
  -- A late commit: the reaper took the item back (it may run again); counted, not applied.
  if action == 'commit' then redis.call('HINCRBY', b.stats, 'late', 1) end
  return {NOT_HELD, 0}
end
record_call(b.calls, b.calls_at, 'settle:' .. reservation, 1, now)
tick(b.flow, 'busy', busy, now)
local receives, id, at, payload, charged, mark, tier = bucket_parse_slot(slot)
if action == 'backoff' and not actual then actual = 0 end
if actual and receives then bucket_correct_cost(b, key, actual - (charged or 1), mark) end

local send = 0
if action == 'retry' or action == 'backoff' then
  if action == 'retry' then redis.call('HINCRBY', b.stats, 'retried', 1) end
  if action == 'backoff' then
    -- The key is paused for every worker (GT: a longer pause, or one until resumed, stays);
    -- the call goes back as it came, its receive not counted. Pauses that ran out are
    -- forgotten here (and in bucket_pause.lua), where they are added.
    forget_expired(b.paused, now)
    redis.call('ZADD', b.paused, 'GT', now + tonumber(detail), key)
    redis.call('HINCRBY', b.stats, 'backoffs', 1)
    redis.call('HINCRBY', b.keystats, key .. '\0backoffs', 1)
    if receives then slot = bucket_make_slot(math.max(receives - 1, 0), id, at, payload, charged, nil, tier) end
  end
  -- Back to the head of its key's queue; the whole key waits out the delay (an HTTP 429 is
  -- about the key, and the key's order is kept).
  bucket_push_head(b, key, slot)
  local when = bucket_eligible_at(b, key, now + tonumber(detail), now)
  -- GT: never pull an already later eligibility forward; adds the key when it is absent (it
  -- has room: this call left it). A key paused until resumed stays out.
  if when < math.huge then bucket_ready(b, key, when, 'GT') end
  send = plan_drain(b.drains, b.wake, b.lease, now, now)
else
  if action == 'commit' then
    redis.call('HINCRBY', b.stats, 'processed', 1)
    redis.call('HINCRBY', b.keystats, key .. '\0processed', 1)
  else
    bucket_bury(b, key, slot, detail, now)
  end
  tick(b.flow, 'out', 1, now)
  tick(b.flow, 'done', 1, now)
  -- A key at its concurrency limit (an ordered key: one in flight) left the ready set; once a
  -- call settles, its next may go.
  if bucket_concurrency(b, key) > 0 then bucket_make_eligible(b, key, now) end
end

-- A correction of its cost moves the key's place in the ready set (a key eligible already
-- keeps its place unless the correction puts it in the future).
local score = actual and b.cost_interval > 0 and tonumber(redis.call('ZSCORE', b.ready, key))
local when = score and bucket_eligible_at(b, key, 0, now)
if when and when < math.huge and (when > now or score > now) then
  bucket_ready(b, key, math.max(when, now), 'XX')
end
return {SETTLED, send}
