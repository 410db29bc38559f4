-- Forget up to `limit` locks whose lease ran out before `now` (a holder that died): each is
-- counted as expired. Bounded: O(limit * log N).
local function unique_forget_expired(locks, limit, now)
  local old = redis.call('ZRANGEBYSCORE', locks.expiry, '-inf', now, 'LIMIT', 0, limit)
  if #old > 0 then
    redis.call('ZREM', locks.expiry, unpack(old))
    redis.call('HDEL', locks.held, unpack(old))
    redis.call('HINCRBY', locks.stats, 'expired', #old)
  end
  return #old
end
