-- Let an entry into `pool` (a pool_keys table; spliced in at "--#include pool_admit"): new,
-- returned by the reaper, retried, requeued or due. It takes a free place, or the policy
-- decides. `count`: the calls it stands for; `receives`: times handed out so far (0: none is
-- kept); `offered_at`: when it was first offered (ms; coalescing pools keep it per member, other
-- members carry it in their id, and it is their slot's age if the slot was empty). Returns a
-- status of pool_status.lua (REFUSED, KEPT, EVICTED, MERGED), the calls evicted to make room, and
-- the member evicted (nil when none was: pool_add replies it, so its call's waiter is told).
--#include pool_status
--#include pool_evict
--#include pool_id
--#include pool_arrival
--#include pool_arrive
local function pool_admit(pool, member, score, count, receives, offered_at)
  if pool.coalesce and redis.call('ZSCORE', pool.items, member) then
    -- An entry of one call keeps no count (most entries of a storm of distinct calls).
    if redis.call('HINCRBY', pool.counts, member, count) == count then
      redis.call('HINCRBY', pool.counts, member, 1)
    end
    -- A returned entry merging into an equal one keeps its receives, or a failing payload
    -- that keeps being offered would never reach the dead-letter list.
    if receives > tonumber(redis.call('HGET', pool.receives, member) or '0') then
      redis.call('HSET', pool.receives, member, receives)
    end
    return MERGED, 0
  end
  local status, evicted, victim = KEPT, 0, nil
  if redis.call('ZCARD', pool.items) >= pool.capacity then
    if pool.policy == 'newest' then
      victim = redis.call('ZRANGE', pool.items, 0, 0)[1]
    elseif pool.policy == 'sample' then
      -- Bottom-k sample: keep the capacity lowest random scores seen since the last drain.
      local top = redis.call('ZRANGE', pool.items, -1, -1, 'WITHSCORES')
      if score < tonumber(top[2]) then victim = top[1] end
    end
    if not victim then return REFUSED, 0 end
    status, evicted = EVICTED, pool_evict(pool, victim)
  end
  redis.call('ZADD', pool.items, string.format('%.17g', score), member)
  -- A debounced call (pool_debounce.lua) stands for its count in any pool.
  if count ~= 1 then redis.call('HSET', pool.counts, member, count) end
  if pool.coalesce then
    redis.call('ZADD', pool.ages, offered_at, member)
  else
    local _, n = pool_id(member, false)
    local _, slot = pool_arrival(n)
    pool_arrive(pool.ages, pool.arrivals, slot, offered_at, 1)
  end
  if receives > 0 then redis.call('HSET', pool.receives, member, receives) end
  return status, evicted, victim
end
