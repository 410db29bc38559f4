-- Offer calls to a capped pool (or hold them until due), and plan the drain job they need.
-- KEYS: the first ten of pool_common.lua's. ARGV[1..4]: common (capacity, policy, coalesce,
-- drain lease ms).
-- ARGV[5] dedupe window ms (0: no producer-side deduplication)
-- ARGV[6], ARGV[7], ... groups of 4: random score in [0, 1), payload, dedupe id ('' for none),
-- delay ms (0: now)
-- Returns {send_drain, wake_in_ms, status...}: send_drain 1 means "send a drain job now";
-- wake_in_ms >= 0 means "send a drain job with this countdown" (no job is scheduled earlier).
-- Status: 0 refused, 1 kept, 2 kept and an older entry evicted, 3 merged into an equal entry,
-- 4 refused as a duplicate, 5 held until due. Bounded: O(batch * log N).
-- The hot path (one call, no dedupe id, no delay, a pool with room) is ~10 commands: what a
-- call does not use (dedupe, the delayed set, the wake key) costs nothing.
--#include pool_common
local window = tonumber(ARGV[5])
local calls = (#ARGV - 5) / 4
local dedupe, any_delay = false, false
for i = 6, #ARGV, 4 do
  local delay = tonumber(ARGV[i + 3])
  if not tonumber(ARGV[i]) or not delay then
    return redis.error_reply('ERR pool_add: call ' .. (i - 2) / 4 .. ' has a bad score or delay')
  end
  if delay > 0 then any_delay = true end
  if ARGV[i + 2] ~= '' then dedupe = true end
end
dedupe = dedupe and window > 0

local now = pool_now()
-- Forget a few expired dedupe ids whenever ids are recorded: bounded work, and the set cannot
-- grow unbounded (each id recorded forgets up to 100 expired ones).
if dedupe then forget_expired(K_DEDUPE, now) end

-- Ids for the whole batch in one step (a duplicate leaves a gap: ids need only be unique).
local seq = redis.call('HINCRBY', K_STATS, 'seq', calls) - calls
local accepted, rejected, evicted, queued, duplicates, delayed = 0, 0, 0, 0, 0, 0
local result = {0, -1}
-- The common case in one ZADD per zset: plain calls (no dedupe id, no delay) that all fit in
-- a pool that does not coalesce are each kept as they come (status 1): nothing is evicted or
-- merged, so the per-call admission below would only repeat ZCARD.
if not dedupe and not any_delay and not COALESCE
    and redis.call('ZCARD', K_ITEMS) + calls <= CAPACITY then
  local entries, ages = {}, {}
  for i = 6, #ARGV, 4 do
    seq = seq + 1
    local member = string.format('%x:%s', seq, ARGV[i + 1])
    entries[#entries + 1] = POLICY == 'sample' and ARGV[i] or seq
    entries[#entries + 1] = member
    ages[#ages + 1] = now
    ages[#ages + 1] = member
    result[#result + 1] = 1
  end
  redis.call('ZADD', K_ITEMS, unpack(entries))
  redis.call('ZADD', K_AGES, unpack(ages))
  accepted, queued = calls, calls
else
  for i = 6, #ARGV, 4 do
    local score, payload, dedupe_id, delay = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
    seq = seq + 1
    local status
    if dedupe and dedupe_id ~= '' and redis.call('ZSCORE', K_DEDUPE, dedupe_id) then
      status = 4
      duplicates = duplicates + 1
      rejected = rejected + 1
    elseif delay > 0 then
      redis.call('ZADD', K_SCHEDULED, now + delay, string.format('%x', seq) .. ':' .. ARGV[i] .. ':' .. payload)
      status = 5
      delayed = delayed + 1
    else
      local member = payload
      if not COALESCE then member = string.format('%x:%s', seq, payload) end
      if POLICY ~= 'sample' then score = seq end
      local out
      status, out = admit(member, score, 1, 0, now)
      if status > 0 then
        accepted = accepted + 1
        queued = queued + 1 - out
        evicted = evicted + out
      else
        rejected = rejected + 1
      end
    end
    -- Remember the dedupe id only for a call that was taken: a refused call may be retried.
    if dedupe and dedupe_id ~= '' and status ~= 0 and status ~= 4 then
      redis.call('ZADD', K_DEDUPE, now + window, dedupe_id)
    end
    result[#result + 1] = status
  end
end

-- One HINCRBY per counter that moved.
if accepted + rejected > 0 then redis.call('HINCRBY', K_STATS, 'offered', accepted + rejected) end
if accepted > 0 then redis.call('HINCRBY', K_STATS, 'accepted', accepted) end
if rejected > 0 then redis.call('HINCRBY', K_STATS, 'rejected', rejected) end
if duplicates > 0 then redis.call('HINCRBY', K_STATS, 'duplicates', duplicates) end
if evicted > 0 then redis.call('HINCRBY', K_STATS, 'evicted', evicted) end
if queued ~= 0 then redis.call('HINCRBY', K_STATS, 'queued', queued) end
if delayed > 0 then redis.call('HINCRBY', K_STATS, 'delayed', delayed) end
pool_tick('in', accepted + rejected, now)

-- One wake mechanism for immediate and delayed calls (plan_drain in common.lua): entries
-- waiting need a drain job now unless one holds the flag; delayed calls need one scheduled
-- for the first of them unless one is scheduled no later. A call that kept an entry knows
-- the pool is not empty without asking.
local send, wait
if accepted > 0 and not any_delay then
  send, wait = plan_drain(K_DRAINS, K_WAKE, DRAIN_TTL, now, now)
else
  send, wait = plan_pool_drain(now)
end
result[1], result[2] = send, wait
return result
