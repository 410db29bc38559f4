-- Settle entries a consumer of one group was handed: acknowledge what succeeded; leave what
-- failed pending, to be claimed again after its retry delay, or dead-letter it past max
-- receives (or at once when asked: an entry that cannot be decoded).
-- KEYS[1..12]: see stream_common.lua (stream, then the group's keys).
-- ARGV[1] group, ARGV[2] processed-guard window ms (0: off), ARGV[3] max_receives,
-- ARGV[4] visibility timeout ms, ARGV[5] drain lease ms, ARGV[6] seconds the bodies took,
-- then per entry: id, error ('' = ok), retry delay ms, dead now (1|0).
-- Reply: {processed, retried, dead, stale, send_drain}: stale counts entries that were no
-- longer pending for the group (claimed and settled by another consumer, or trimmed);
-- send_drain is 1 when held entries came free and this call armed the drain lease.
-- Lost reply: safe to run twice (XACK of an acknowledged entry does nothing: a second run counts
-- those entries as stale in its reply, not in the figures)
--#include stream_common
local group, processed_guard_ms = ARGV[1], tonumber(ARGV[2])
local max_receives, visibility = tonumber(ARGV[3]), tonumber(ARGV[4])
local drain_lease_ms, busy_seconds = tonumber(ARGV[5]), tonumber(ARGV[6])
if not processed_guard_ms or not max_receives or not visibility or not busy_seconds
  or (#ARGV - 6) % 4 ~= 0 then
  return redis.error_reply('ERR stream_ack: malformed arguments')
end
local now = now_ms()
if processed_guard_ms > 0 then forget_expired(K_DONE, now) end

local processed, retried, dead, stale, freed = 0, 0, 0, 0, 0
for i = 7, #ARGV, 4 do
  local id, err, delay, dead_now = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3] == '1'
  local receives, owner = receives_of(group, id)
  if err == '' then
    if processed_guard_ms > 0 then redis.call('ZADD', K_DONE, now + processed_guard_ms, id) end
    if receives > 0 then
      redis.call('XACK', K_EVENTS, group, id)
      processed = processed + 1
      freed = freed + release_key(id)
    else
      stale = stale + 1
    end
  elseif receives == 0 then
    stale = stale + 1
  elseif dead_now or receives >= max_receives then
    local f = entry_of(id)
    if f then bury(group, id, f, receives, err, now) else stale = stale + 1 end
    redis.call('XACK', K_EVENTS, group, id)
    if f then dead = dead + 1 end
    freed = freed + release_key(id)
  else
    -- Stays pending with its owner; its idle time is set so that it becomes claimable (idle
    -- longer than the visibility timeout) once the retry delay has passed.
    local idle = visibility - delay
    if idle < 0 then idle = 0 end
    redis.call('XCLAIM', K_EVENTS, group, owner, 0, id, 'IDLE', idle, 'JUSTID')
    retried = retried + 1
  end
end
if processed > 0 then redis.call('HINCRBY', K_GSTATS, 'processed', processed) end
if retried > 0 then redis.call('HINCRBY', K_GSTATS, 'retried', retried) end
tick(K_GFLOW, 'out', processed + dead, now)
tick(K_GFLOW, 'done', processed + dead, now)
tick(K_GFLOW, 'busy', busy_seconds, now)
local send = 0
if freed > 0 and redis.call('SET', K_DRAIN, 1, 'NX', 'PX', drain_lease_ms) then send = 1 end
return {processed, retried, dead, stale, send}
