-- The key has as many calls in flight as its concurrency allows (bucket_concurrency.lua;
-- reservations count, whoever holds them; b.keystats "key NUL in_flight").
--#include bucket_concurrency
local function bucket_at_capacity(b, key)
  local limit = bucket_concurrency(b, key)
  return limit > 0 and tonumber(redis.call('HGET', b.keystats, key .. '\0in_flight') or '0') >= limit
end
