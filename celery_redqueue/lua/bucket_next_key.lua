-- The key a poll looks at first: the one eligible longest (b.ready's first), unless a key of a
-- higher tier is eligible now (b.urgent, bucket_sync_urgent.lua) and the first has not waited
-- past the bound (the starvation bound across keys). {key, score} or {} (nothing is eligible).
--#include bucket_band
local function bucket_next_key(b, now)
  local top = redis.call('ZRANGE', b.ready, 0, 0, 'WITHSCORES')
  if b.priority_bound <= 0 or #top == 0 or tonumber(top[2]) <= now - b.priority_bound or redis.call('ZCARD', b.urgent) == 0 then return top end
  for tier = 9, 1, -1 do
    local band = bucket_band(tier)
    local hit = redis.call('ZRANGEBYSCORE', b.urgent, band - HALF_BAND, band + now, 'LIMIT', 0, 1)[1]
    local score = hit and redis.call('ZSCORE', b.ready, hit)
    if score then return {hit, score} elseif hit then redis.call('ZREM', b.urgent, hit) end  -- not ready: only corruption
  end
  return top
end
