-- Forget up to 100 ids whose window ended (dedupe ids, processed-guard ids): bounded work per
-- call, and the zset cannot grow without limit.
local function forget_expired(zset, now)
  local old = redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then redis.call('ZREM', zset, unpack(old)) end
end
