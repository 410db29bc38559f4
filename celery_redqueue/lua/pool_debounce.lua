-- Debounce one call into a capped pool: calls with the same dedupe id collapse into one
-- delayed call, the latest payload replacing the held one, due once the id has been quiet for
-- the window (capped at its first call + max wait). The held call is an ordinary delayed call
-- (KEYS[9] scheduled) whose member carries its count and its id ("<id>#<count>#<hex id>:
-- <score>:<payload>"); pool_due offers it with that count (the body's count=, as coalescing),
-- and forgets the id's record (KEYS[21]). Every call is counted delayed while held; a call that
-- replaced a held one also counts as debounced.
-- KEYS[1..21]: the pool's keys (pool_keys.lua names each).
-- ARGV[1..4]: common (capacity, policy, coalesce, drain lease ms). ARGV[5] window ms,
-- ARGV[6] max wait ms (0: none), ARGV[7] call id, ARGV[8] random score in [0, 1),
-- ARGV[9] payload, ARGV[10] dedupe id.
-- Returns {send_drain, wake_in_ms, status, count}: as pool_add's (status DELAYED for the first
-- call of its id, MERGED for one that replaced the held call), and the calls now held.
-- Checks every key and counter it touches before its first write. Bounded: O(log N).
-- Lost reply: safe to run twice (the call id's record: a re-sent call replies what the first
-- run did and writes nothing)
--#include clock
--#include add_counts
--#include plan_drain
--#include wake_listener
--#include pool_keys
--#include pool_status
--#include pool_take_ids
--#include record_call
--#include recorded
--#include check_keys
local pool = pool_keys(KEYS, ARGV)
local window, max_wait, call_id = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local score, payload, key = ARGV[8], ARGV[9], ARGV[10]
if not (window and window > 0 and max_wait and tonumber(score) and key and key ~= '') then
  return redis.error_reply('ERR pool_debounce: bad window, max wait, score or dedupe id')
end
check_keys({pool.items, 'zset', pool.scheduled, 'zset', pool.debounce, 'hash', pool.calls,
  'hash', pool.calls_at, 'zset', pool.drains, 'string', pool.wake, 'string', pool.listening,
  'zset', pool.signal, 'list'}, pool.stats)
local done = recorded(pool.calls, call_id)
if done then return cmsgpack.unpack(done) end

local now = math.floor(now_ms())
local first, count, status = now, 1, DELAYED
local held = redis.call('HGET', pool.debounce, key)
if held then
  local since, old = string.match(held, '^(%d+) (.*)$')
  if since and redis.call('ZSCORE', pool.scheduled, old) then
    local n = string.match(old, '^%x+#(%d+)#')
    first, count, status = tonumber(since), tonumber(n or '1') + 1, MERGED
    redis.call('ZREM', pool.scheduled, old)
  end
end
local due = now + window
if max_wait > 0 and first + max_wait < due then due = first + max_wait end
local seq = pool_take_ids(pool.stats, 1, now) + 1
local hex = string.gsub(key, '.', function(ch) return string.format('%02x', string.byte(ch)) end)
local member = string.format('%x#%d#%s:%s:%s', seq, count, hex, score, payload)
redis.call('ZADD', pool.scheduled, due, member)
redis.call('HSET', pool.debounce, key, string.format('%d', first) .. ' ' .. member)
add_counts(pool.stats, {delayed = 1, debounced = status == MERGED and 1 or 0})

-- As pool_add: a listener is woken and plans the wake-up itself, else one drain job is
-- scheduled for the first delayed call unless one is scheduled no later.
local result = {0, -1, status, count}
if not wake_listener(pool.listening, pool.signal, pool.lease, now) then
  local next_at
  if redis.call('ZCARD', pool.items) > 0 then
    next_at = now
  else
    next_at = tonumber(redis.call('ZRANGE', pool.scheduled, 0, 0, 'WITHSCORES')[2])
  end
  result[1], result[2] = plan_drain(pool.drains, pool.wake, pool.lease, now, next_at)
end
record_call(pool.calls, pool.calls_at, call_id, cmsgpack.pack(result), now)
return result
