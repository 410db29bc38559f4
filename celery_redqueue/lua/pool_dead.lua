-- Requeue or purge dead letters of a pool.
-- KEYS: see pool_common.lua. ARGV[1..4]: common (capacity, policy, coalesce, drain ttl).
-- ARGV[5] action: requeue | purge
-- ARGV[6] how many from the oldest when no entries are named (-1: all)
-- ARGV[7], ... exact dead-letter entries to act on (as listed); none: the oldest ARGV[6]
-- Requeued calls re-enter the pool with their receive count reset (competing for room; what
-- does not fit counts as evicted). Returns {calls acted on, send_drain}.
-- Bounded: O(entries * log N); "all" is done by the caller in chunks.
--#include pool_common
local action, limit = ARGV[5], tonumber(ARGV[6])
local now = pool_now()
local entries = {}
if #ARGV >= 7 then
  for i = 7, #ARGV do
    if redis.call('LREM', K_DEAD, 1, ARGV[i]) == 1 then entries[#entries + 1] = ARGV[i] end
  end
else
  if limit < 0 then limit = 1000 end
  for _ = 1, limit do
    local entry = redis.call('LPOP', K_DEAD)
    if not entry then break end
    entries[#entries + 1] = entry
  end
end
local calls, evicted, queued = 0, 0, 0
for _, entry in ipairs(entries) do
  local newline = string.find(entry, '\n', 1, true)
  local info = cjson.decode(string.sub(entry, 1, newline - 1))
  local payload = string.sub(entry, newline + 1)
  local count = tonumber(info['count'])
  calls = calls + count
  if action == 'requeue' then
    local seq = redis.call('HINCRBY', K_STATS, 'seq', 1)
    local member = payload
    if not COALESCE then member = string.format('%x', seq) .. ':' .. payload end
    local score = seq
    if POLICY == 'sample' then score = -1 end
    local status, out = admit(member, score, count, 0, now)
    evicted = evicted + out
    queued = queued - out  -- what admit pushed out leaves the depth
    if status > 0 then queued = queued + count else evicted = evicted + count end
  end
end
if calls == 0 then return {0, 0} end
-- (Never "HINCRBY -0": Lua formats negative zero as "-0", which Redis refuses.)
redis.call('HINCRBY', K_STATS, 'dead', -calls)
if action == 'purge' then
  redis.call('HINCRBY', K_STATS, 'purged', calls)
else
  if queued ~= 0 then redis.call('HINCRBY', K_STATS, 'queued', queued) end
  if evicted > 0 then redis.call('HINCRBY', K_STATS, 'evicted', evicted) end
end
local send = 0
if queued > 0 and arm_drain() then send = 1 end
return {calls, send}
