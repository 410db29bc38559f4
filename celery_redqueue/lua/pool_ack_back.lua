-- Put the calls an ack retried now back in the pool (pool_ack replied back 1: the batch is still
-- in flight, holding only them). Each competes for room like any entry, keeping its place (its
-- score), receives and age; what does not fit counts as evicted, what it pushes out leaves the
-- depth. A batch record that cannot be decoded is dead-lettered whole, with the reason.
-- KEYS[1..21]: the pool's keys (pool_keys.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] batch id.
-- Checks every key it writes, the stats counters and the counts its entries move (their
-- arrival slots, or a coalescing member's count and receives; the whole arrivals hash when the
-- pool is full: the entry pushed out may be any) before its first write (a bad one: CORRUPT,
-- nothing written).
-- Reply: {retried, send_drain}: the calls put back; send_drain 1: they need a drain job the
-- caller should send (none holds the flag).
-- Bounded: O(batch * log N).
-- Lost reply: safe to run twice: the first run took the batch out of flight; a second finds
-- nothing and replies {0, 0} (the drain that acked pops next; the reaper asks for a drain job
-- once a dead drain's lease runs out).
--#include clock
--#include pool_keys
--#include pool_status
--#include pool_id
--#include pool_arrival
--#include pool_unpack_batch
--#include pool_admit
--#include pool_bury
--#include add_counts
--#include check_keys
--#include check_fields
local pool = pool_keys(KEYS, ARGV)
local batch_id = ARGV[5]
local now = math.floor(now_ms())
check_keys({pool.items, 'zset', pool.counts, 'hash', pool.receives, 'hash', pool.ages, 'zset',
  pool.arrivals, 'hash', pool.dead, 'list', pool.inflight, 'zset', pool.inflight_calls, 'hash',
  pool.inflight_items, 'hash', pool.drains, 'string'}, pool.stats)
local calls = tonumber(redis.call('HGET', pool.inflight_calls, batch_id) or '')
if not calls then return {0, 0} end
local packed = redis.call('HGET', pool.inflight_items, batch_id) or ''
local entries = pool_unpack_batch(packed, calls, pool.coalesce)
-- The counts admission moves, read before anything is written.
local fields = {}
for _, entry in ipairs(entries or {}) do
  local _, n = pool_id(entry[1], pool.coalesce)
  if pool.coalesce then
    for _, key in ipairs({pool.counts, pool.receives}) do fields[#fields + 1], fields[#fields + 2] = key, entry[1] end
  elseif n then
    fields[#fields + 1], fields[#fields + 2] = pool.arrivals, select(2, pool_arrival(n))
  end
end
check_fields(fields)
if entries and not pool.coalesce and redis.call('ZCARD', pool.items) + #entries > pool.capacity then
  check_keys({}, pool.arrivals)
end

redis.call('HDEL', pool.inflight_calls, batch_id)
redis.call('HDEL', pool.inflight_items, batch_id)
redis.call('ZREM', pool.inflight, batch_id)
local c = {in_flight = -calls, retried = 0, depth = 0, evicted = 0}
if not entries then
  pool_bury(pool, packed, calls, 0, 'undecodable batch record (cannot put its calls back)', now)
end
for _, entry in ipairs(entries or {}) do
  local count = entry[3]
  local status, out = pool_admit(pool, entry[1], entry[2], count, entry[4], entry[5])
  -- What admit pushed out was waiting in the pool: it leaves the depth too.
  local back = status ~= REFUSED and count or 0
  c.retried, c.depth, c.evicted = c.retried + back, c.depth + back - out, c.evicted + out + count - back
end
add_counts(pool.stats, c)
local send = c.retried > 0 and redis.call('SET', pool.drains, 1, 'NX', 'PX', pool.lease)
return {c.retried, send and 1 or 0}
