-- Offer plain calls to a capped pool (no dedupe id, no delay: the common .delay(), and the
-- batches of add_many and buffer()), and plan the drain job they need. pool_add does the same
-- for dedupe ids and delays; this one receives less and does less, because it runs on every
-- call: a pool with room keeps a call in eight commands and returns. The helpers only a full
-- or coalescing pool needs (pool_admit's) are included after that return: Lua runs a script top
-- to bottom, so the common case never defines them (defining them costs it about 1 us of
-- server CPU per call, 6 %, measured from the server's CPU time over 60,000 calls).
-- Why a twin of pool_add, not one script with a branch: the same plain call through pool_add
-- took 158.2 us against this script's 97.5 us (43.6 against 26.4 us inside Redis), the pooled
-- .delay() 166.8 us in the same run: one script would cost the producer about a third more
-- (.venv/bin/python bench/pool_bench.py --only producer --calls 20000, the "via pool_add" row).
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
--#include listener_live
--#include checked_call
--#include pool_status
--#include pool_next_ids
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
-- Everything it reads or could fail on, before its first write (Redis does not roll back a
-- script that fails half-way): a key of another type, or a counter that is not an integer,
-- stops it here, named (checked_call.lua), nothing written. The commands it runs anyway are
-- the checks, plus the stats fields and the ages type: 3 us of server time per call over the
-- unchecked script (+12 %; +3 % per add), bench/script_cost.py pool_add_plain --against <rev>.
local depth = checked_call('ZCARD', K_ITEMS)
local fields = checked_call('HMGET', K_STATS, 'seq', 'offered+accepted+depth')
local last = fields[1] or '0'
if not (string.match(last, '^%d+$') and string.match(fields[2] or '0', '^%-?%d+$')) then
  error('CORRUPT ' .. K_STATS .. ' field seq or offered+accepted+depth is not an integer', 0)
end
local ok, live = pcall(listener_live, K_LISTENING, now)
if not ok then error('CORRUPT ' .. K_LISTENING .. ' holds another type than a zset', 0) end
local signal_empty = live and checked_call('LLEN', K_SIGNAL) == 0
-- Entries wait: a drain job is needed now unless one holds the flag (plan_drain.lua's rule;
-- the wake key is not touched), or a listener waits on the wake signal (wake_listener.lua's
-- rule): it is woken and takes them. (A drains key of another type: SET NX leaves it.)
local function entries_wait(result)
  tick(K_FLOW, 'in', calls, now)
  if live then
    if signal_empty then
      redis.call('RPUSH', K_SIGNAL, 1)
      redis.call('PEXPIRE', K_SIGNAL, lease)
    end
  elseif redis.call('SET', K_DRAINS, 1, 'NX', 'PX', lease) then
    result[1] = 1
  end
  return result
end
local result = {0, -1}
if not coalesce and depth + calls <= capacity then
  -- Ids carry the arrival (pool_take_ids.lua); FIFO policies order by them too. Known before
  -- the first write, so the arrival slots are counted first: the first slot's count is the
  -- first write (checked_call names a bad one), a second slot's (a batch across a slot's last
  -- ids: rare) is read first, and the ages type is checked.
  local seq = pool_next_ids(tonumber(last), now)
  local entries, n, slots, order = {}, 0, {}, {}
  for i = 5, #ARGV, 2 do
    seq, n = seq + 1, n + 2
    local member = string.format('%x:%s', seq, ARGV[i + 1])
    entries[n - 1], entries[n] = sample and ARGV[i] or string.format('%d', seq), member
    result[n / 2 + 2] = KEPT
    local _, slot = pool_arrival(seq)
    if not slots[slot] then order[#order + 1] = slot end
    slots[slot] = (slots[slot] or 0) + 1
  end
  local kind = redis.call('TYPE', K_AGES).ok
  if kind ~= 'zset' and kind ~= 'none' then error('CORRUPT ' .. K_AGES .. ' holds a ' .. kind, 0) end
  for i = 2, #order do
    if not string.match(checked_call('HGET', K_ARRIVALS, order[i]) or '0', '^%d+$') then
      error('CORRUPT ' .. K_ARRIVALS .. ' field ' .. order[i] .. ' is not an integer', 0)
    end
  end
  for i, slot in ipairs(order) do
    if i == 1 and checked_call('HINCRBY', K_ARRIVALS, slot, slots[slot]) == slots[slot] then
      redis.call('ZADD', K_AGES, now, slot)
    elseif i > 1 then
      pool_arrive(K_AGES, K_ARRIVALS, slot, now, slots[slot])
    end
  end
  pool_take_ids(K_STATS, calls, now)
  redis.call('ZADD', K_ITEMS, unpack(entries))
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
--#include check_keys
check_keys({K_ITEMS, 'zset', KEYS[2], 'hash', KEYS[5], 'hash', K_AGES, 'zset', K_ARRIVALS,
  'hash'}, K_STATS)
check_keys({}, K_ARRIVALS)  -- the slot counts pool_admit and pool_evict change
local seq = pool_take_ids(K_STATS, calls, now)
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
