-- Requeue or purge dead letters of a pool.
-- KEYS[1..21]: the pool's keys (pool_keys.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] action: requeue | purge
-- ARGV[6] how many from the oldest when no entries are named (-1: all)
-- ARGV[7], ... exact dead-letter entries to act on (as listed); none: the oldest ARGV[6]
-- Requeued calls re-enter the pool with their receive count reset (competing for room; what
-- does not fit counts as evicted). Reply: {calls acted on, send_drain}.
-- Bounded: O(entries * log N); "all" is done by the caller in chunks.
-- Lost reply: safe to run twice (the package names the exact letters: a second run finds them
-- gone)
--#include clock
--#include dead_candidates
--#include parse_letter
--#include pool_keys
--#include pool_status
--#include pool_take_ids
--#include pool_admit
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local action, limit = ARGV[5], tonumber(ARGV[6])
local now = math.floor(now_ms())
-- Read and check every dead letter before removing any: one that cannot be parsed stays listed
-- when requeued (nothing says what it is) and is deleted, counted as one call, when purged.
check_keys({pool.items, 'zset', pool.counts, 'hash', pool.receives, 'hash', pool.ages, 'zset',
  pool.arrivals, 'hash', pool.dead, 'list', pool.drains, 'string'}, pool.stats)
local entries = {}
for _, entry in ipairs(dead_candidates(pool.dead, ARGV, 7, limit)) do
  local info, payload = parse_letter(entry)
  local count = info and tonumber(info['count'])
  if count then
    entries[#entries + 1] = {entry = entry, count = count, payload = payload}
  elseif action == 'purge' then
    entries[#entries + 1] = {entry = entry, count = 1, payload = ''}
  end
end
local calls, evicted, depth = 0, 0, 0
for _, e in ipairs(entries) do
  local removed = redis.call('LREM', pool.dead, 1, e.entry)
  local count, payload = e.count * removed, e.payload
  calls = calls + count
  if action == 'requeue' and removed == 1 then
    local seq = pool_take_ids(pool.stats, 1, now) + 1
    local member = payload
    if not pool.coalesce then member = string.format('%x', seq) .. ':' .. payload end
    local score = seq
    if pool.policy == 'sample' then score = -1 end
    local status, out = pool_admit(pool, member, score, count, 0, now)
    evicted = evicted + out
    depth = depth - out  -- what admit pushed out leaves the depth
    if status ~= REFUSED then depth = depth + count else evicted = evicted + count end
  end
end
if calls == 0 then return {0, 0} end
-- (Never "HINCRBY -0": Lua formats negative zero as "-0", which Redis refuses.)
redis.call('HINCRBY', pool.stats, 'dead', -calls)
if action == 'purge' then
  redis.call('HINCRBY', pool.stats, 'purged', calls)
else
  if depth ~= 0 then redis.call('HINCRBY', pool.stats, 'depth', depth) end
  if evicted > 0 then redis.call('HINCRBY', pool.stats, 'evicted', evicted) end
end
-- Requeued calls wait in the pool: they need a drain job unless one holds the flag.
local send = 0
if depth > 0 and redis.call('SET', pool.drains, 1, 'NX', 'PX', pool.lease) then send = 1 end
return {calls, send}
