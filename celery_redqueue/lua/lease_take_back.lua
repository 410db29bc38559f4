-- Return up to `limit` expired leases (leases.leased) to the free set, scored by their expiry
-- (the moment they really became free), unless the resource was removed meanwhile.
-- Returns how many leases expired and how many resources became free.
local function lease_take_back(leases, limit, now)
  local expired = redis.call('ZRANGEBYSCORE', leases.leased, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  local returned = 0
  for i = 1, #expired, 2 do
    local resource = expired[i]
    redis.call('ZREM', leases.leased, resource)
    redis.call('HDEL', leases.tokens, resource)
    if redis.call('SISMEMBER', leases.resources, resource) == 1 then
      redis.call('ZADD', leases.free, expired[i + 1], resource)
      returned = returned + 1
    end
  end
  if #expired > 0 then redis.call('HINCRBY', leases.stats, 'reclaimed', #expired / 2) end
  return #expired / 2, returned
end
