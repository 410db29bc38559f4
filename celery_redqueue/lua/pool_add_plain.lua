-- Offer plain calls to a capped pool (no dedupe id, no delay: the common .delay(), and the
-- batches of add_many and buffer()), and plan the drain job they need. pool_add does the same
-- for dedupe ids and delays; this one receives less and does less, because it runs on every
-- call: a pool with room keeps a call in eight commands and returns. The helpers only a full
-- or coalescing pool needs (pool_admit's) are included after that return: Lua runs a script top
-- to bottom, so the common case never defines them (defining them costs it about 1 us of
-- server CPU per call, 6 %, measured from the server's CPU time over 60,000 calls).
-- KEYS: those of pool_keys.lua's this line names (KEYS[9], KEYS[10]: signal, listening):
-- Parts: items counts stats drains receives ages arrivals flow signal listening
-- ARGV[1..4]: common (capacity, policy, coalesce, drain lease ms).
-- ARGV[5], ARGV[6], ... pairs: random score in [0, 1), payload
-- Returns {send_drain, -1, status...} as pool_add does (wake_in_ms is always -1: nothing
-- waits; status: pool_status.lua's KEPT, or on the full or coalescing path REFUSED, EVICTED,
-- MERGED). Bounded: O(calls * log N).
-- Lost reply: raises (a store: a second run would keep the calls twice)
--#include clock
--#include tick
--#include wake_listener
--#include pool_status
--#include pool_take_ids
--#include pool_arrival
--#include pool_arrive
local K_ITEMS, K_STATS, K_DRAINS, K_AGES, K_ARRIVALS = KEYS[1], KEYS[3], KEYS[4], KEYS[6], KEYS[7]
local K_FLOW, K_SIGNAL, K_LISTENING = KEYS[8], KEYS[9], KEYS[10]
local capacity, sample, coalesce = tonumber(ARGV[1]), ARGV[2] == 'sample', ARGV[3] == '1'
local lease, calls = ARGV[4], (#ARGV - 4) / 2
if not capacity or calls < 1 or calls ~= math.floor(calls) then
  return redis.error_reply('ERR pool_add_plain: a bad capacity, or no (score, payload) pairs')
end
for i = 5, #ARGV, 2 do
  if not tonumber(ARGV[i]) then
    return redis.error_reply('ERR pool_add_plain: call ' .. (i - 3) / 2 .. ' has a bad score')
  end
end

local now = math.floor(now_ms())
-- Entries wait: a drain job is needed now unless one holds the flag (plan_drain.lua's rule;
-- the wake key is not touched), or a listener waits on the wake signal (wake_listener.lua):
-- it is woken and takes them.
local function entries_wait(result)
  tick(K_FLOW, 'in', calls, now)
  if not wake_listener(K_LISTENING, K_SIGNAL, lease, now)
      and redis.call('SET', K_DRAINS, 1, 'NX', 'PX', lease) then
    result[1] = 1
  end
  return result
end
-- Ids carry the arrival (pool_take_ids.lua); FIFO policies order by them too. One step for the batch.
local seq = pool_take_ids(K_STATS, calls, now)
local result = {0, -1}
if not coalesce and redis.call('ZCARD', K_ITEMS) + calls <= capacity then
  local entries, n, slots = {}, 0, {}
  for i = 5, #ARGV, 2 do
    seq, n = seq + 1, n + 2
    local member = string.format('%x:%s', seq, ARGV[i + 1])
    entries[n - 1], entries[n] = sample and ARGV[i] or string.format('%d', seq), member
    result[n / 2 + 2] = KEPT
    local _, slot = pool_arrival(seq)
    slots[slot] = (slots[slot] or 0) + 1
  end
  redis.call('ZADD', K_ITEMS, unpack(entries))
  for slot, entries_in in pairs(slots) do pool_arrive(K_AGES, K_ARRIVALS, slot, now, entries_in) end
  -- One folded counter for offered, accepted and depth (three counters) (figures.unfold reads it).
  redis.call('HINCRBY', K_STATS, 'offered+accepted+depth', calls)
  return entries_wait(result)
end

-- Full, or coalescing: the policy decides for each call, as in pool_add.
--#include add_counts
--#include pool_admit
local pool = {items = K_ITEMS, counts = KEYS[2], receives = KEYS[5], ages = K_AGES,
  arrivals = K_ARRIVALS, capacity = capacity, policy = ARGV[2], coalesce = coalesce}
local c = {offered = calls, accepted = 0, rejected = 0, depth = 0, evicted = 0}
for i = 5, #ARGV, 2 do
  seq = seq + 1
  local member = ARGV[i + 1]
  if not coalesce then member = string.format('%x:%s', seq, member) end
  local status, out = pool_admit(pool, member, sample and tonumber(ARGV[i]) or seq, 1, 0, now)
  if status == REFUSED then
    c.rejected = c.rejected + 1
  else
    c.accepted, c.depth, c.evicted = c.accepted + 1, c.depth + 1 - out, c.evicted + out
  end
  result[#result + 1] = status
end
add_counts(K_STATS, c)
-- A refused call found the pool full, so entries wait either way.
return entries_wait(result)
