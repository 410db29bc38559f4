-- Debounce one call into a leaky bucket: calls with the same dedupe id collapse into one
-- delayed call of their key, the latest payload replacing the held one, due once the id has
-- been quiet for the window (capped at its first call + max wait). The held call is an
-- ordinary delayed item (b.scheduled: "id[/cost] key NUL payload") whose payload starts with
-- "NUL debounced:<count>:<hex dedupe id> NUL" (LeakyBucket strips it and passes the count, the
-- body's count=); bucket_upkeep queues it when due and forgets the id's record (b.debounce:
-- dedupe id -> "first call ms, space, member"). A held call counts as delayed (one per id, as
-- any delayed item); a call that replaced a held one counts as debounced.
-- KEYS and ARGV[1..7]: see bucket_keys.lua. ARGV[8] window ms, ARGV[9] max wait ms (0: none),
-- ARGV[10] call id, ARGV[11] key, ARGV[12] payload, ARGV[13] dedupe id, ARGV[14] cost ('' for
-- none), ARGV[15] priority tier (0-9: bucket_tier_heads.lua; the latest call's, as its cost).
-- Returns {send_drain, wake_in_ms, status, count}: as bucket_enqueue's (status DELAYED for the
-- first call of its id, MERGED for one that replaced the held call), and the calls now held.
-- Checks every key and counter it touches before its first write. Bounded: O(log N).
-- Lost reply: safe to run twice (the call id's record: a re-sent call replies what the first
-- run did and writes nothing)
--#include bucket_keys
--#include clock
--#include wake_listener
--#include bucket_statuses
--#include bucket_cost_rate
--#include bucket_plan_drain
--#include record_call
--#include recorded
--#include check_keys
local b = bucket_keys(KEYS, ARGV)
local window, max_wait, call_id = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local key, payload, dedupe_id, cost = ARGV[11], ARGV[12], ARGV[13], ARGV[14]
local tier = tonumber(ARGV[15] or '0')
if not (window and window > 0 and max_wait and key and key ~= '' and dedupe_id and dedupe_id ~= '' and tier and tier >= 0 and tier <= 9 and tier % 1 == 0) then
  return redis.error_reply('ERR bucket_debounce: bad window, max wait, key, dedupe id or tier')
end
if cost ~= '' then
  local units, limit = tonumber(cost), select(3, bucket_cost_rate(b, key))
  if not units or units < 0 then return redis.error_reply('ERR bucket_debounce: bad cost ' .. cost) end
  if limit > 0 and units > limit then
    return redis.error_reply('ERR bucket cost ' .. cost .. ' of key ' .. key .. ' exceeds what its cost rate allows in one period (' .. limit .. ')')
  end
end
check_keys({b.scheduled, 'zset', b.debounce, 'hash', b.ready, 'zset', b.calls, 'hash',
  b.calls_at, 'zset', b.drains, 'string', b.wake, 'string', b.listening, 'zset', b.signal,
  'list', b.rates, 'hash'}, b.stats)
local done = recorded(b.calls, call_id)
if done then return cmsgpack.unpack(done) end

local now = math.floor(now_ms())
local first, count, status = now, 1, DELAYED
local held = redis.call('HGET', b.debounce, dedupe_id)
local since, old = string.match(held or '', '^(%d+) (.*)$')
-- A record whose member is gone (released, or another program's) starts a new window.
if since and redis.call('ZSCORE', b.scheduled, old) then
  local n = string.match(old, '^[^ ]* [^%z]*%z%zdebounced:(%d+):')
  first, count, status = tonumber(since), tonumber(n or '1') + 1, MERGED
  redis.call('ZREM', b.scheduled, old)
end
local due = now + window
if max_wait > 0 and first + max_wait < due then due = first + max_wait end
local id = redis.call('HINCRBY', b.stats, 'seq', 1)
local stamp = cost ~= '' and (id .. '/' .. string.format('%.17g', tonumber(cost))) or tostring(id)
if tier > 0 then stamp = stamp .. '^' .. tier end
local hex = string.gsub(dedupe_id, '.', function(ch) return string.format('%02x', string.byte(ch)) end)
local member = stamp .. ' ' .. key .. '\0\0debounced:' .. count .. ':' .. hex .. '\0' .. payload
redis.call('ZADD', b.scheduled, due, member)
redis.call('HSET', b.debounce, dedupe_id, string.format('%d', first) .. ' ' .. member)
redis.call('HINCRBY', b.stats, status == MERGED and 'debounced' or 'delayed', 1)

-- As bucket_enqueue: a listener is woken (its poll plans the wake-up itself), else a drain job
-- is scheduled for the first due work unless one is scheduled no later.
local result = {0, -1, status, count}
if not wake_listener(b.listening, b.signal, b.lease, now) then result[1], result[2] = bucket_plan_drain(b, now) end
record_call(b.calls, b.calls_at, call_id, cmsgpack.pack(result), now)
return result
