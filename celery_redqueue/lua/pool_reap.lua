-- Take back in-flight batches whose deadline passed (their drain died or overran).
-- At most once: their calls count as lost. At least once: each entry goes back into the pool
-- (competing for room like any entry; what does not fit counts as evicted), or to the
-- dead-letter list once it has been received max_receives times.
-- KEYS: see pool_common.lua. ARGV[1..4]: common (capacity, policy, coalesce, drain ttl).
-- ARGV[5] most batches to reap in this call, ARGV[6] at least once (1|0), ARGV[7] max receives
-- Returns {lost, returned, dead_lettered, send_drain}. Bounded: O(limit * batch * log N).
--#include pool_common
local at_least_once, max_receives = ARGV[6] == '1', tonumber(ARGV[7])
local now = pool_now()
local expired = redis.call('ZRANGEBYSCORE', K_INFLIGHT, '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
local lost, returned, buried, evicted, pushed_out = 0, 0, 0, 0, 0
for _, batch in ipairs(expired) do
  local calls = tonumber(redis.call('HGET', K_INFLIGHT_CALLS, batch) or '0')
  local packed = redis.call('HGET', K_INFLIGHT_ITEMS, batch)
  redis.call('HDEL', K_INFLIGHT_CALLS, batch)
  redis.call('HDEL', K_INFLIGHT_ITEMS, batch)
  redis.call('ZREM', K_INFLIGHT, batch)
  if calls > 0 then redis.call('HINCRBY', K_STATS, 'in_flight', -calls) end
  if at_least_once and packed then
    for _, entry in ipairs(cjson.decode(packed)) do
      local member, score, count = entry[1], tonumber(entry[2]), tonumber(entry[3])
      local receives, offered_at = tonumber(entry[4]), tonumber(entry[5])
      if receives >= max_receives then
        bury(payload_of(member), count, receives, 'batch not acknowledged before its deadline ('
          .. receives .. ' receives)', now)
        buried = buried + count
      else
        local status, out = admit(member, score, count, receives, offered_at)
        evicted = evicted + out
        pushed_out = pushed_out + out  -- what admit pushed out leaves the depth
        if status > 0 then returned = returned + count else evicted = evicted + count end
      end
    end
  else
    lost = lost + calls
  end
end
if lost > 0 then redis.call('HINCRBY', K_STATS, 'lost', lost) end
if returned - pushed_out ~= 0 then redis.call('HINCRBY', K_STATS, 'queued', returned - pushed_out) end
if returned > 0 then redis.call('HINCRBY', K_STATS, 'redelivered', returned) end
if evicted > 0 then redis.call('HINCRBY', K_STATS, 'evicted', evicted) end
-- Returned calls need a drain job even if the dead drain's flag is still alive (its TTL was
-- refreshed at its last pop): re-arm it and tell the caller to send one.
local send = 0
if #expired > 0 and redis.call('ZCARD', K_ITEMS) > 0 then
  redis.call('SET', K_DRAINS, 1, 'PX', DRAIN_TTL)
  send = 1
end
return {lost, returned, buried, send}
