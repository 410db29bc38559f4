-- Dead-letter `count` calls of `pool` (a pool_keys table; spliced in at "--#include pool_bury"):
-- metadata as JSON, then the payload after a newline, and the `dead` counter.
local function pool_bury(pool, payload, count, receives, err, now)
  local info = cjson.encode({count = count, receives = receives, error = err, at = now})
  redis.call('RPUSH', pool.dead, info .. '\n' .. payload)
  redis.call('HINCRBY', pool.stats, 'dead', count)
end
