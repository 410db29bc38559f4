-- Set one key's concurrency limit for every worker (BullMQ Pro's setGroupConcurrency), or clear
-- it (the bucket's own applies again).
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] key, ARGV[9] the limit (an integer >= 1; '' clears it).
-- Raised, a key at its old limit with calls waiting becomes eligible at once; lowered, the
-- calls in flight finish and the key releases none until it is under the new limit.
-- Reply: {changed, send_drain}. changed 0: the key had that limit already. send_drain 1: the
-- drain flag was armed here, the caller should send a drain job. Bounded: O(log K).
-- Lost reply: safe to run twice (a second run finds the limit set and reports changed 0)
--#include bucket_keys
--#include clock
--#include check_keys
--#include plan_drain
--#include bucket_eligible_at
--#include bucket_make_eligible
local b = bucket_keys(KEYS, ARGV)
local key, limit = ARGV[8], ARGV[9]
if not key or key == '' or (limit ~= '' and not string.match(limit or '', '^[1-9]%d*$')) then
  return redis.error_reply('ERR bucket_set_concurrency: bad key or limit')
end
-- Everything it writes or reads before writing: the right types, and the key's numbers.
check_keys({b.urgent, 'zset', b.items, 'hash', b.rates, 'hash', b.ready, 'zset', b.drains, 'string', b.wake, 'string',
            b.keystats, 'hash', b.heads, 'hash', b.tails, 'hash', b.tat, 'hash',
            b.paused, 'zset'})
for _, field in ipairs({{b.keystats, key .. '\0in_flight'}, {b.heads, key}, {b.tails, key}}) do
  local v = redis.call('HGET', field[1], field[2])
  if v and not tonumber(v) then
    error(string.format('CORRUPT %s field %q: %q is not a number', field[1], field[2], v), 0)
  end
end
local now = now_ms()
local field = key .. '\0conc'
if (redis.call('HGET', b.rates, field) or '') == limit then return {0, 0} end
if limit == '' then redis.call('HDEL', b.rates, field) else redis.call('HSET', b.rates, field, limit) end
if not bucket_make_eligible(b, key, now) then return {1, 0} end
return {1, (plan_drain(b.drains, b.wake, b.lease, now, now))}
