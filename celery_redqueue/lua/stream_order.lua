-- Ordered groups: an entry waits, held, while an earlier entry of its partition key is in flight
-- (spliced in by stream_common.lua, after stream_entries).

-- The pseudo-consumer that owns entries parked behind an earlier entry of their key.
local HELD = '~held'

-- Stream ids compare as numbers "ms-seq"; zero-padded they also compare as strings.
local function padded(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return string.rep('0', 20 - #ms) .. ms .. '-' .. string.rep('0', 20 - #seq) .. seq
end

local function held_member(key, id)
  return key .. '\n' .. padded(id)
end

-- Ordered groups: the entry `id` no longer holds its key; the next held entry of that key (if
-- any) takes the key and is queued in `ready`. Returns 1 when an entry became ready.
local function release_key(id)
  local key = redis.call('HGET', K_BUSY, 'i:' .. id)
  if not key then return 0 end
  redis.call('HDEL', K_BUSY, 'i:' .. id)
  if redis.call('HGET', K_BUSY, 'k:' .. key) ~= id then return 0 end
  local nxt = redis.call('ZRANGEBYLEX', K_HELD, '[' .. key .. '\n', '[' .. key .. '\n\255',
    'LIMIT', 0, 1)
  if #nxt == 0 then
    redis.call('HDEL', K_BUSY, 'k:' .. key)
    return 0
  end
  redis.call('ZREM', K_HELD, nxt[1])
  local ms, seq = string.match(string.sub(nxt[1], #key + 2), '^0*(%d+)-0*(%d+)$')
  local next_id = ms .. '-' .. seq
  redis.call('HSET', K_BUSY, 'k:' .. key, next_id, 'i:' .. next_id, key)
  redis.call('RPUSH', K_READY, next_id)
  return 1
end
