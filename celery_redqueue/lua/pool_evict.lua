-- Take an entry out of `pool` (a pool_keys table) with everything kept about it (spliced in at
-- "--#include pool_evict"); returns the calls it stood for (a corrupted count counts as one).
--#include pool_id
--#include pool_arrival
--#include pool_depart
local function pool_evict(pool, member)
  redis.call('ZREM', pool.items, member)
  redis.call('HDEL', pool.receives, member)
  if pool.coalesce then
    local calls = tonumber(redis.call('HGET', pool.counts, member) or '1') or 1
    redis.call('ZREM', pool.ages, member)
    redis.call('HDEL', pool.counts, member)
    return calls
  end
  local _, n = pool_id(member, false) if n then pool_depart(pool.ages, pool.arrivals, {[select(2, pool_arrival(n))] = 1}) end
  -- A debounced call's entry stands for its count (pool_debounce.lua).
  local calls = tonumber(redis.call('HGET', pool.counts, member) or '1') or 1
  if calls ~= 1 then redis.call('HDEL', pool.counts, member) end return calls
end
