-- Move due delayed calls in, pop up to n entries as one in-flight batch, manage the drain flag.
-- KEYS: see pool_common.lua. ARGV[1..4]: common (capacity, policy, coalesce, drain ttl).
-- ARGV[5] n, ARGV[6] batch id, ARGV[7] batch timeout ms, ARGV[8] most drain jobs at once,
-- ARGV[9] at least once (1|0): keep the entries so the reaper can return them,
-- ARGV[10] processed-guard (1|0): skip entries whose id completed already.
-- ARGV[11] linger (1|0): on an empty pool keep the drain flag (the drain will look again soon,
-- so calls arriving meanwhile need not send another drain job); 0 clears it.
-- Returns {fan_out, remaining, wait_ms, then per entry: payload, count, receives, id}.
-- wait_ms = -3: only guard-skipped entries were popped and more wait: pop again at once.
-- wait_ms = -2: empty, flag kept (linger). An empty pop with wait_ms = -1 means the pool and its delayed set were empty at that instant
-- and the drain flag was cleared in the same step, so nothing arriving afterwards is stranded;
-- wait_ms >= 0 means only delayed calls remain, the first due in wait_ms.
--#include pool_common
local n = tonumber(ARGV[5])
local batch_id = ARGV[6]
local at_least_once, guard = ARGV[9] == '1', ARGV[10] == '1'
local now = pool_now()

-- Due delayed calls are offered now, in due order (bounded by the batch size).
local due = redis.call('ZRANGEBYSCORE', K_SCHEDULED, '-inf', now, 'LIMIT', 0, n)
if #due > 0 then
  local accepted, rejected, evicted, queued = 0, 0, 0, 0
  for _, entry in ipairs(due) do
    redis.call('ZREM', K_SCHEDULED, entry)
    local seq, score, payload = string.match(entry, '^(%x+):([^:]*):(.*)$')
    local member = payload
    if not COALESCE then member = seq .. ':' .. payload end
    local sc = tonumber(score)
    if POLICY ~= 'sample' then sc = tonumber(seq, 16) end
    local status, out = admit(member, sc, 1, 0, now)
    evicted = evicted + out
    queued = queued - out
    if status > 0 then accepted = accepted + 1; queued = queued + 1 else rejected = rejected + 1 end
  end
  redis.call('HINCRBY', K_STATS, 'delayed', -#due)
  redis.call('HINCRBY', K_STATS, 'offered', #due)
  redis.call('HINCRBY', K_STATS, 'accepted', accepted)
  redis.call('HINCRBY', K_STATS, 'rejected', rejected)
  redis.call('HINCRBY', K_STATS, 'evicted', evicted)
  redis.call('HINCRBY', K_STATS, 'queued', queued)
  pool_tick('in', #due, now)
end

local result = {0, 0, -1}
local kept = {}
local calls, skipped = 0, 0
-- Entries the guard skips are not delivered; pop again (a bounded number of times) so that a
-- pop returns nothing only when the pool is really empty.
for _ = 1, 10 do
  local popped = redis.call('ZPOPMIN', K_ITEMS, n)
  if #popped == 0 then break end
  for i = 1, #popped, 2 do
    local member, score = popped[i], popped[i + 1]
    local count = count_of(member)
    local receives = tonumber(redis.call('HGET', K_RECEIVES, member) or '0') + 1
    local offered_at = redis.call('ZSCORE', K_AGES, member)
    local id = member
    if not COALESCE then id = string.sub(member, 1, string.find(member, ':', 1, true) - 1) end
    redis.call('ZREM', K_AGES, member)
    redis.call('HDEL', K_RECEIVES, member)
    if COALESCE then redis.call('HDEL', K_COUNTS, member) end
    if guard and redis.call('ZSCORE', K_DONE, id) then
      -- A redelivered entry whose body already completed: it is not applied twice.
      skipped = skipped + count
    else
      calls = calls + count
      result[#result + 1] = payload_of(member)
      result[#result + 1] = count
      result[#result + 1] = receives
      result[#result + 1] = id
      kept[#kept + 1] = {member, score, count, receives, offered_at or now, id}
    end
  end
  if calls > 0 then break end
end

if calls + skipped > 0 then redis.call('HINCRBY', K_STATS, 'queued', -(calls + skipped)) end
if skipped > 0 then
  redis.call('HINCRBY', K_STATS, 'processed', skipped)
  redis.call('HINCRBY', K_STATS, 'guard_skipped', skipped)
  pool_tick('out', skipped, now)
end
if calls > 0 then
  redis.call('ZADD', K_INFLIGHT, now + tonumber(ARGV[7]), batch_id)
  redis.call('HSET', K_INFLIGHT_CALLS, batch_id, calls)
  if at_least_once then redis.call('HSET', K_INFLIGHT_ITEMS, batch_id, cjson.encode(kept)) end
  redis.call('HINCRBY', K_STATS, 'in_flight', calls)
end

if calls == 0 then
  if redis.call('ZCARD', K_ITEMS) > 0 then
    return {0, 0, -3}  -- everything popped was skipped by the guard, more waits: pop again
  end
  local first = redis.call('ZRANGE', K_SCHEDULED, 0, 0, 'WITHSCORES')
  if #first == 0 then
    if ARGV[11] == '1' then return {0, 0, -2} end
    redis.call('DEL', K_DRAINS, K_WAKE)
    return {0, 0, -1}
  end
  -- Only delayed calls remain: the caller schedules a drain job for the first one.
  local when = tonumber(first[2])
  redis.call('SET', K_WAKE, when, 'PX', when - now + tonumber(DRAIN_TTL))
  redis.call('SET', K_DRAINS, 1, 'PX', when - now + tonumber(DRAIN_TTL))
  return {0, 0, when - now}
end

redis.call('DEL', K_WAKE)
local remaining = redis.call('ZCARD', K_ITEMS)
result[2] = remaining
-- One drain job per batch still waiting, up to the fan-out limit.
result[1] = claim_drain(K_DRAINS, DRAIN_TTL, tonumber(ARGV[8]), remaining / n)
return result
