-- Letting entries into a capped pool, and the drain job its work needs (spliced in by
-- pool_common.lua, after pool_members).

-- Let an entry in (new, returned by the reaper, requeued or due): it takes a free place, or
-- the policy decides (`offered_at`: when it was first offered, ms; only coalescing pools need
-- it, other members carry it in their id). Returns status (0 refused, 1 kept, 2 kept and an older entry evicted,
-- 3 merged) and the calls evicted to make room.
local function admit(member, score, count, receives, offered_at)
  if COALESCE and redis.call('ZSCORE', K_ITEMS, member) then
    -- An entry of one call keeps no count (most entries of a storm of distinct calls).
    if redis.call('HINCRBY', K_COUNTS, member, count) == count then
      redis.call('HINCRBY', K_COUNTS, member, 1)
    end
    -- A returned entry merging into an equal one keeps its receives, or a failing payload
    -- that keeps being offered would never reach the dead-letter list.
    if receives > tonumber(redis.call('HGET', K_RECEIVES, member) or '0') then
      redis.call('HSET', K_RECEIVES, member, receives)
    end
    return 3, 0
  end
  local size = redis.call('ZCARD', K_ITEMS)
  local status, evicted = 1, 0
  if size >= CAPACITY then
    if POLICY == 'newest' then
      evicted = remove(redis.call('ZRANGE', K_ITEMS, 0, 0)[1])
      status = 2
    elseif POLICY == 'sample' then
      -- Bottom-k sample: keep the CAPACITY lowest random scores seen since the last drain.
      local top = redis.call('ZRANGE', K_ITEMS, -1, -1, 'WITHSCORES')
      if score < tonumber(top[2]) then
        evicted = remove(top[1])
        status = 2
      else
        status = 0
      end
    else
      status = 0
    end
  end
  if status > 0 then
    redis.call('ZADD', K_ITEMS, string.format('%.17g', score), member)
    note_arrival(member, offered_at)
    if COALESCE and count ~= 1 then redis.call('HSET', K_COUNTS, member, count) end
    if receives > 0 then redis.call('HSET', K_RECEIVES, member, receives) end
  end
  return status, evicted
end

-- When the pool next has work: now if entries wait, else when the first delayed call is due
-- (nil: nothing at all). Then plan the drain job that work needs (drain_lease.lua's plan_drain).
local function plan_pool_drain(now)
  local next_at = nil
  if redis.call('ZCARD', K_ITEMS) > 0 then
    next_at = now
  else
    local first = redis.call('ZRANGE', K_SCHEDULED, 0, 0, 'WITHSCORES')
    if #first > 0 then next_at = tonumber(first[2]) end
  end
  return plan_drain(K_DRAINS, K_WAKE, DRAIN_LEASE_MS, now, next_at)
end
