-- Pop up to n entries as one in-flight batch when they need more than the common pop
-- (pool_pop replies MIXED): entries received before (returned by the reaper or a failed ack),
-- coalesced entries with their counts, the processed guard, malformed entries. An entry
-- received before is popped alone: a batch of one when it comes first, else it waits for a
-- later pop (a call that killed its batch's process cannot take good calls down with it
-- again). Entries the guard skips (their id completed already) count as processed and are not
-- delivered; malformed entries are dead-lettered with the reason.
-- KEYS[1..21], ARGV[1..13]: pool_pop's (ARGV[10..14] are not read here).
-- Reply: pool_pop's, with status TAKEN, or AGAIN when nothing was handed out (only skipped
-- entries were taken, the pool emptied meanwhile, or the batch id is in flight already: run
-- pool_pop again with the same arguments, which replays that batch, pops what is left or ends
-- the drain). Bounded: O(n log N).
-- Checks every key it touches, the stats counters and the arrival slots of the entries it
-- reads before its first write (a bad one: CORRUPT, nothing written).
-- Lost reply: safe to run twice: a pop whose batch id is in flight already pops nothing and
-- replies AGAIN (pool_pop, run next, replays the batch); an AGAIN wrote only skipped entries
-- away.
--#include clock
--#include tick
--#include take_status
--#include pool_keys
--#include pool_read_entries
--#include pool_forget_entries
--#include pool_bury
--#include pool_reply_entries
--#include pool_hold
--#include check_keys
--#include check_fields
local pool = pool_keys(KEYS, ARGV)
local n, batch_id, timeout_ms = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local max_drains, guard = tonumber(ARGV[8]), ARGV[9] == '1'
local now = math.floor(now_ms())
local result = {TAKEN, 0, 0, -1, 0, 0}
check_keys({pool.items, 'zset', pool.counts, 'hash', pool.receives, 'hash', pool.ages, 'zset',
  pool.arrivals, 'hash', pool.dead, 'list', pool.done, 'zset', pool.inflight, 'zset',
  pool.inflight_calls, 'hash', pool.inflight_items, 'hash', pool.drains, 'string'}, pool.stats)
if redis.call('HEXISTS', pool.inflight_calls, batch_id) == 1 then
  result[1] = AGAIN
  return pool_reply_entries(result, {})
end

local kept, calls, skipped, guarded, malformed = {}, 0, 0, 0, 0
local range = redis.call('ZRANGE', pool.items, 0, n - 1, 'WITHSCORES')
local e = pool_read_entries(pool, range, guard, now)
-- pool_forget_entries counts the entries out of their arrival slots: read them first.
local slots = {}
for _, slot in pairs(e.slot) do slots[#slots + 1], slots[#slots + 2] = pool.arrivals, slot end
check_fields(slots)
local gone, alone = {}, false
for i = 1, #range / 2 do
  local bad, done = e.bad[i], e.done[i]
  -- An entry received before came back from a batch that died or failed: it goes alone,
  -- so a call that kills its process kills only itself. Later pops hand it out.
  local again = not bad and not done and e.receives[i] > 1
  if not (alone or (again and calls > 0)) then
    gone[#gone + 1] = i
    local count = e.count[i]
    if bad then
      pool_bury(pool, e.member[i], count, e.receives[i], bad, now)
      malformed, skipped = malformed + count, skipped + count
    elseif done then
      -- A redelivered entry whose body already completed: it is not applied twice.
      guarded, skipped = guarded + count, skipped + count
    else
      calls, alone = calls + count, again
      local at = #kept
      kept[at + 1], kept[at + 2], kept[at + 3] = e.member[i], e.score[i], count
      kept[at + 4], kept[at + 5] = e.receives[i], e.offered[i]
    end
  end
end
pool_forget_entries(pool, e, gone)
result[6] = malformed
if calls + skipped > 0 then redis.call('HINCRBY', pool.stats, 'depth', -(calls + skipped)) end
if guarded > 0 then
  redis.call('HINCRBY', pool.stats, 'guard_skipped', guarded)
  redis.call('HINCRBY', pool.stats, 'processed', guarded)
  tick(pool.flow, 'out', guarded, now)
end
if calls == 0 then
  result[1] = AGAIN
  return pool_reply_entries(result, {})
end
-- One drain job per batch still waiting, up to the fan-out limit; the reply is the batch as
-- kept, as pool_pop would replay it.
result[2], result[3] = pool_hold(pool, batch_id, calls, cmsgpack.pack(5, kept), timeout_ms,
  max_drains, n, now)
local members, counts, receives = {}, {}, {}
for i = 1, #kept / 5 do
  members[i], counts[i], receives[i] = kept[5 * i - 4], kept[5 * i - 2], kept[5 * i - 1]
end
return pool_reply_entries(result, members, counts, receives)
