-- Requeue or purge dead letters of a pool.
-- KEYS[1..20]: the pool's keys (pool_common.lua names each).
-- ARGV[1..4]: the pool's settings (capacity, policy, coalesce, drain lease ms).
-- ARGV[5] action: requeue | purge
-- ARGV[6] how many from the oldest when no entries are named (-1: all)
-- ARGV[7], ... exact dead-letter entries to act on (as listed); none: the oldest ARGV[6]
-- Requeued calls re-enter the pool with their receive count reset (competing for room; what
-- does not fit counts as evicted). Reply: {calls acted on, send_drain}.
-- Bounded: O(entries * log N); "all" is done by the caller in chunks.
-- Lost reply: safe to run twice (the package names the exact letters: a second run finds them
-- gone)
--#include pool_common
--#include dead_letters
local action, limit = ARGV[5], tonumber(ARGV[6])
local now = pool_now()
-- Read and check every dead letter before removing any: one that cannot be parsed stays listed
-- when requeued (nothing says what it is) and is deleted, counted as one call, when purged.
local entries = {}
for _, entry in ipairs(dead_candidates(K_DEAD, 7, limit)) do
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
  local removed = redis.call('LREM', K_DEAD, 1, e.entry)
  local count, payload = e.count * removed, e.payload
  calls = calls + count
  if action == 'requeue' and removed == 1 then
    local seq = take_ids(K_STATS, 1, now) + 1
    local member = payload
    if not COALESCE then member = string.format('%x', seq) .. ':' .. payload end
    local score = seq
    if POLICY == 'sample' then score = -1 end
    local status, out = admit(member, score, count, 0, now)
    evicted = evicted + out
    depth = depth - out  -- what admit pushed out leaves the depth
    if status > 0 then depth = depth + count else evicted = evicted + count end
  end
end
if calls == 0 then return {0, 0} end
-- (Never "HINCRBY -0": Lua formats negative zero as "-0", which Redis refuses.)
redis.call('HINCRBY', K_STATS, 'dead', -calls)
if action == 'purge' then
  redis.call('HINCRBY', K_STATS, 'purged', calls)
else
  if depth ~= 0 then redis.call('HINCRBY', K_STATS, 'depth', depth) end
  if evicted > 0 then redis.call('HINCRBY', K_STATS, 'evicted', evicted) end
end
local send = 0
if depth > 0 and plan_pool_drain(now) == 1 then send = 1 end
return {calls, send}
