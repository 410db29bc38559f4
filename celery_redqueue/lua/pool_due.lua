-- Offer up to n of the pool's due delayed calls, in due order (pool_pop replies UPKEEP when some
-- are due, and pops again after this). Each gets a fresh id, so its age and its FIFO place
-- count from now, and competes for room like any call; one that cannot be read is
-- dead-lettered (counted as offered, accepted and dead, so the identities hold).
-- KEYS[1..20]: the pool's keys (pool_keys.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms). ARGV[5] n.
-- Reply: how many delayed calls were dead-lettered as unreadable. Bounded: O(n log N).
-- Lost reply: safe to run twice (each call offered leaves the delayed set in the same step, so
-- a second run offers only calls still due: the next ones, or none)
--#include clock
--#include tick
--#include add_counts
--#include pool_keys
--#include pool_status
--#include pool_take_ids
--#include pool_admit
--#include pool_bury
local pool = pool_keys(KEYS, ARGV)
local n = tonumber(ARGV[5])
if not (n and n >= 1 and pool.capacity) then return redis.error_reply('ERR pool_due: bad n') end
local now = math.floor(now_ms())
local due = redis.call('ZRANGEBYSCORE', pool.scheduled, '-inf', now, 'LIMIT', 0, n)
if #due == 0 then return 0 end
local c = {delayed = -#due, offered = #due, accepted = 0, rejected = 0, evicted = 0, depth = 0}
local malformed = 0
local seq = pool_take_ids(pool.stats, #due, now)
for i, entry in ipairs(due) do
  redis.call('ZREM', pool.scheduled, entry)
  local id, score, payload = string.match(entry, '^(%x+):([^:]*):(.*)$')
  score = tonumber(score)
  if not (id and score) then
    pool_bury(pool, entry, 1, 0, 'malformed entry: unreadable delayed call', now)
    c.accepted, malformed = c.accepted + 1, malformed + 1
  else
    local member = payload
    if not pool.coalesce then member = string.format('%x:%s', seq + i, payload) end
    if pool.policy ~= 'sample' then score = seq + i end
    local status, out = pool_admit(pool, member, score, 1, 0, now)
    c.evicted, c.depth = c.evicted + out, c.depth - out
    if status == REFUSED then
      c.rejected = c.rejected + 1
    else
      c.accepted, c.depth = c.accepted + 1, c.depth + 1
    end
  end
end
add_counts(pool.stats, c)
tick(pool.flow, 'in', #due, now)
return malformed
