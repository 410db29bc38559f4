-- Settle entries a consumer of one group was handed: acknowledge what succeeded; leave what
-- failed pending, to be claimed again after its retry delay, or dead-letter it past max
-- receives (or at once when asked: an entry that cannot be decoded).
-- KEYS[1..12]: see stream_keys.lua (stream, then the group's keys).
-- ARGV[1] group, ARGV[2] processed-guard window ms (0: off), ARGV[3] max_receives,
-- ARGV[4] visibility timeout ms, ARGV[5] drain lease ms, ARGV[6] seconds the bodies took,
-- then per entry: id, error ('' = ok), retry delay ms, dead now (1|0).
-- Reply: {processed, retried, dead, stale, send_drain}: stale counts entries that were no
-- longer pending for the group (claimed and settled by another consumer, or trimmed);
-- send_drain is 1 when held entries came free and this call armed the drain flag.
-- Lost reply: safe to run twice (XACK of an acknowledged entry does nothing: a second run counts
-- those entries as stale in its reply, not in the figures)
--#include stream_keys
--#include stream_check
--#include stream_bury
--#include stream_entry
--#include stream_receives
--#include stream_release_key
--#include forget_expired
--#include tick
--#include clock
local s = stream_keys(KEYS, true)
stream_check(s)
local group, processed_guard_ms = ARGV[1], tonumber(ARGV[2])
local max_receives, visibility = tonumber(ARGV[3]), tonumber(ARGV[4])
local drain_lease_ms, busy_seconds = tonumber(ARGV[5]), tonumber(ARGV[6])
if not processed_guard_ms or not max_receives or not visibility or not busy_seconds
  or (#ARGV - 6) % 4 ~= 0 then
  return redis.error_reply('ERR stream_ack: malformed arguments')
end
local now = now_ms()
if processed_guard_ms > 0 then forget_expired(s.done, now) end

local processed, retried, dead, stale, freed = 0, 0, 0, 0, 0
for i = 7, #ARGV, 4 do
  local id, err, delay, dead_now = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3] == '1'
  local receives, owner = stream_receives(s, group, id)
  if err == '' then
    if processed_guard_ms > 0 then redis.call('ZADD', s.done, now + processed_guard_ms, id) end
    if receives > 0 then
      redis.call('XACK', s.events, group, id)
      processed = processed + 1
      freed = freed + stream_release_key(s, id)
    else
      stale = stale + 1
    end
  elseif receives == 0 then
    stale = stale + 1
  elseif dead_now or receives >= max_receives then
    local f = stream_entry(s, id)
    if f then stream_bury(s, group, id, f, receives, err, now) else stale = stale + 1 end
    redis.call('XACK', s.events, group, id)
    if f then dead = dead + 1 end
    freed = freed + stream_release_key(s, id)
  else
    -- Stays pending with its owner; its idle time is set so that it becomes claimable (idle
    -- longer than the visibility timeout) once the retry delay has passed.
    local idle = visibility - delay
    if idle < 0 then idle = 0 end
    redis.call('XCLAIM', s.events, group, owner, 0, id, 'IDLE', idle, 'JUSTID')
    retried = retried + 1
  end
end
if processed > 0 then redis.call('HINCRBY', s.gstats, 'processed', processed) end
if retried > 0 then redis.call('HINCRBY', s.gstats, 'retried', retried) end
tick(s.gflow, 'out', processed + dead, now)
tick(s.gflow, 'done', processed + dead, now)
tick(s.gflow, 'busy', busy_seconds, now)
local send = 0
if freed > 0 and redis.call('SET', s.drains, 1, 'NX', 'PX', drain_lease_ms) then send = 1 end
return {processed, retried, dead, stale, send}
