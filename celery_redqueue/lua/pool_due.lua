-- Offer up to n of the pool's due delayed calls, in due order (pool_pop replies UPKEEP when some
-- are due, and pops again after this). Each gets a fresh id, so its age and its FIFO place
-- count from now, and competes for room like any call; one that cannot be read is
-- dead-lettered (counted as offered, accepted and dead, so the identities hold). A retried call
-- waiting out its retry delay (pool_ack.lua: "<id>/<receives>/<count>:...") was accepted before
-- and is counted in depth: it comes back with its receives and count, offered again to nobody.
-- KEYS[1..21]: the pool's keys (pool_keys.lua names each).
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
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local n = tonumber(ARGV[5])
if not (n and n >= 1 and pool.capacity) then return redis.error_reply('ERR pool_due: bad n') end
local now = math.floor(now_ms())
check_keys({pool.items, 'zset', pool.counts, 'hash', pool.receives, 'hash', pool.ages, 'zset',
  pool.arrivals, 'hash', pool.scheduled, 'zset', pool.dead, 'list', pool.flow, 'hash',
  pool.debounce, 'hash'}, pool.stats)
local due = redis.call('ZRANGEBYSCORE', pool.scheduled, '-inf', now, 'LIMIT', 0, n)
if #due == 0 then return 0 end
local c = {delayed = 0, offered = 0, accepted = 0, rejected = 0, evicted = 0, depth = 0}
local malformed = 0
local seq = pool_take_ids(pool.stats, #due, now)
for i, entry in ipairs(due) do
  redis.call('ZREM', pool.scheduled, entry)
  local id, meta, score, payload = string.match(entry, '^(%x+)([^:]*):([^:]*):(.*)$')
  score = tonumber(score)
  -- A retried call (pool_ack.lua) carries its receives and count, and was accepted (and
  -- counted in depth) already; a delayed call is offered now.
  local receives, count = 0, 1
  -- A debounced call (pool_debounce.lua: "#<count>#<hex dedupe id>") is offered with its
  -- count, and its dedupe id's record is forgotten (the next call starts a new window).
  local held, hex = nil, nil
  if meta then held, hex = string.match(meta, '^#(%d+)#(%x*)$') end
  local retried = meta ~= nil and meta ~= '' and not held
  if held then
    count = tonumber(held)
    c.delayed, c.offered = c.delayed - count, c.offered + count
    local key = string.gsub(hex, '%x%x', function(h) return string.char(tonumber(h, 16)) end)
    local record = redis.call('HGET', pool.debounce, key)
    if record and string.sub(record, -#entry) == entry then redis.call('HDEL', pool.debounce, key) end
  elseif retried then
    receives, count = string.match(meta, '^/(%d+)/(%d+)$')
    receives, count = tonumber(receives), tonumber(count)
  else
    c.delayed, c.offered = c.delayed - 1, c.offered + 1
  end
  if not (id and score and receives and count) then
    pool_bury(pool, entry, count or 1, receives or 0, 'malformed entry: unreadable delayed call', now)
    malformed = malformed + 1
    if retried then c.depth = c.depth - (count or 1) else c.accepted = c.accepted + count end
  else
    local member = payload
    if not pool.coalesce then member = string.format('%x:%s', seq + i, payload) end
    if pool.policy ~= 'sample' then score = seq + i end
    local status, out = pool_admit(pool, member, score, count, receives, now)
    c.evicted, c.depth = c.evicted + out, c.depth - out
    if status == REFUSED and retried then
      c.evicted, c.depth = c.evicted + count, c.depth - count
    elseif status == REFUSED then
      c.rejected = c.rejected + count
    elseif not retried then
      c.accepted, c.depth = c.accepted + count, c.depth + count
    end
  end
end
add_counts(pool.stats, c)
tick(pool.flow, 'in', c.offered, now)
return malformed
