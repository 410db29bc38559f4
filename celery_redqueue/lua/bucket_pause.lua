-- Pause a key (it keeps accepting calls and releases none) or resume it, for every worker.
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] action: pause | resume, ARGV[9] key, ARGV[10] pause: ms from now ('' until resumed)
-- Reply: {changed, send_drain}. changed 0: a pause that would end sooner than the key's current
-- one (kept), or a resume of a key that was not paused. Safe to run twice. Bounded: O(log K).
-- Lost reply: safe to run twice (the same pause or resume again: a second run finds it done and
-- reports changed 0)
--#include bucket_keys
--#include clock
--#include plan_drain
--#include forget_expired
--#include bucket_eligible_at
--#include bucket_make_eligible
--#include check_keys
--#include bucket_ready
--#include bucket_unready
local b = bucket_keys(KEYS, ARGV)
local action, key, ms = ARGV[8], ARGV[9], ARGV[10]
if (action ~= 'pause' and action ~= 'resume') or not key or key == '' then
  return redis.error_reply('ERR bucket_pause: bad action or key')
end
if action == 'pause' and ms ~= '' and not tonumber(ms) then
  return redis.error_reply('ERR bucket_pause: bad duration ' .. tostring(ms))
end
local now = now_ms()
-- Pauses that ran out are forgotten by the scripts that add pauses (here and a backoff's
-- settle), not by every poll: one that ran out is harmless to a release (its time is past), and
-- a resume must not report it as ended here.
-- The keys it reads or writes, before its first write (check_keys.lua: a key of another type
-- is CORRUPT, nothing written); a pause is rare, a TYPE each is cheap beside it.
check_keys({b.urgent, 'zset', b.items, 'hash', b.paused, 'zset', b.ready, 'zset', b.heads, 'hash', b.tails, 'hash', b.tat, 'hash',
  b.rates, 'hash', b.inflight, 'zset', b.keystats, 'hash', b.drains, 'string', b.wake, 'string',
  b.signal, 'list', b.listening, 'zset'})
forget_expired(b.paused, now)

if action == 'pause' then
  local till = ms == '' and 'inf' or string.format('%.17g', now + tonumber(ms))
  -- GT: a pause never shortens a longer one; a new key is added.
  local changed = redis.call('ZADD', b.paused, 'GT', 'CH', till, key)
  if ms == '' then
    bucket_unready(b, key)
  else
    -- XX GT: a key in the ready set waits until then; one out of it stays out.
    bucket_ready(b, key, till, 'XX', 'GT')
  end
  return {changed, 0}
end

if redis.call('ZREM', b.paused, key) == 0 then return {0, 0} end
-- Out of the ready set (paused until resumed): back in if it has work; in it (a timed pause):
-- its own schedules decide again.
if redis.call('ZSCORE', b.ready, key) then
  bucket_ready(b, key, bucket_eligible_at(b, key, now, now), 'XX')
else
  bucket_make_eligible(b, key, now)
end
return {1, (plan_drain(b.drains, b.wake, b.lease, now, now))}
