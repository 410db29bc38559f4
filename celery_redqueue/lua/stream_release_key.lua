-- Ordered groups: the entry `id` no longer holds its key; the next held entry of that key (if
-- any) takes the key and is queued in `ready`. Returns 1 when an entry became ready.
local function stream_release_key(s, id)
  local key = redis.call('HGET', s.busy, 'i:' .. id)
  if not key then return 0 end
  redis.call('HDEL', s.busy, 'i:' .. id)
  if redis.call('HGET', s.busy, 'k:' .. key) ~= id then return 0 end
  local nxt = redis.call('ZRANGEBYLEX', s.held, '[' .. key .. '\n', '[' .. key .. '\n\255',
    'LIMIT', 0, 1)
  if #nxt == 0 then
    redis.call('HDEL', s.busy, 'k:' .. key)
    return 0
  end
  redis.call('ZREM', s.held, nxt[1])
  local ms, seq = string.match(string.sub(nxt[1], #key + 2), '^0*(%d+)-0*(%d+)$')
  local next_id = ms .. '-' .. seq
  redis.call('HSET', s.busy, 'k:' .. key, next_id, 'i:' .. next_id, key)
  redis.call('RPUSH', s.ready, next_id)
  return 1
end
