-- Add calls to a capped pool, trim to capacity, count, and arm the "drain pending" flag.
-- KEYS[1] items   zset: member -> score (lowest score is popped first, highest evicted by sample)
-- KEYS[2] counts  hash: member -> number of merged calls (coalescing pools only)
-- KEYS[3] stats   hash: counters (offered, accepted, rejected, evicted, queued, seq, capacity)
-- KEYS[4] drains  string: number of drain jobs pending; absent when none is
-- ARGV[1] capacity (distinct entries)
-- ARGV[2] policy: sample | newest | reject
-- ARGV[3] coalesce: 1 | 0
-- ARGV[4] time-to-live of the drains flag, ms (a lost drain message is re-sent after it)
-- ARGV[5], ARGV[6], ... pairs of (random score in [0, 1), payload)
-- Returns {send_drain, status...}: 0 refused, 1 kept, 2 kept and an older entry evicted,
-- 3 merged into an equal entry. Bounded: O(batch * log N).
local items, counts, stats, drains = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local capacity = tonumber(ARGV[1])
local policy = ARGV[2]
local coalesce = ARGV[3] == '1'

local size = redis.call('ZCARD', items)
local accepted, rejected, evicted, queued = 0, 0, 0, 0
local result = {0}

-- Remove one entry, returning how many calls it stood for.
local function drop(member)
  redis.call('ZREM', items, member)
  if coalesce then
    local n = tonumber(redis.call('HGET', counts, member) or '1')
    redis.call('HDEL', counts, member)
    return n
  end
  return 1
end

for i = 5, #ARGV, 2 do
  local payload = ARGV[i + 1]
  local status = 0
  if coalesce and redis.call('HEXISTS', counts, payload) == 1 then
    redis.call('HINCRBY', counts, payload, 1)
    status = 3
  else
    local seq = redis.call('HINCRBY', stats, 'seq', 1)
    local member = payload
    if not coalesce then
      -- A unique prefix keeps equal payloads apart; pop strips it.
      member = string.format('%x', seq) .. ':' .. payload
    end
    local score = seq
    if policy == 'sample' then
      score = tonumber(ARGV[i])
    end
    if size < capacity then
      status = 1
    elseif policy == 'newest' then
      local oldest = redis.call('ZRANGE', items, 0, 0)
      local n = drop(oldest[1])
      evicted = evicted + n
      queued = queued - n
      size = size - 1
      status = 2
    elseif policy == 'sample' then
      -- Bottom-k sample: keep the `capacity` lowest random scores seen since the last drain.
      local top = redis.call('ZRANGE', items, -1, -1, 'WITHSCORES')
      if score < tonumber(top[2]) then
        local n = drop(top[1])
        evicted = evicted + n
        queued = queued - n
        size = size - 1
        status = 2
      end
    end
    if status > 0 then
      redis.call('ZADD', items, score, member)
      if coalesce then
        redis.call('HSET', counts, member, 1)
      end
      size = size + 1
    end
  end
  if status > 0 then
    accepted = accepted + 1
    queued = queued + 1
  else
    rejected = rejected + 1
  end
  result[#result + 1] = status
end

redis.call('HINCRBY', stats, 'offered', accepted + rejected)
if accepted > 0 then redis.call('HINCRBY', stats, 'accepted', accepted) end
if rejected > 0 then redis.call('HINCRBY', stats, 'rejected', rejected) end
if evicted > 0 then redis.call('HINCRBY', stats, 'evicted', evicted) end
if queued ~= 0 then redis.call('HINCRBY', stats, 'queued', queued) end
redis.call('HSET', stats, 'capacity', capacity)

if size > 0 and redis.call('SET', drains, 1, 'NX', 'PX', ARGV[4]) then
  result[1] = 1
end
return result
