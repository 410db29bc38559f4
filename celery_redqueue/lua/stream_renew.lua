-- Heartbeat of a running drain: renew the group's drain flag and the hold of the entries its
-- consumer is working on (their idle time restarts, so they are not claimed by another
-- consumer while the body runs; entries already claimed by someone else are left alone).
-- KEYS[1..12]: see stream_keys.lua (stream, then the group's keys).
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] drain lease ms, ARGV[4 ..] entry ids.
-- Reply: how many entries were renewed.
-- Lost reply: safe to run twice (restarts the idle time of entries still held; again does the
-- same)
--#include stream_keys
--#include stream_check
--#include stream_receives
local s = stream_keys(KEYS, true)
stream_check(s)
local group, consumer, drain_lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not drain_lease_ms then return redis.error_reply('ERR stream_renew: malformed arguments') end
local renewed = 0
for i = 4, #ARGV do
  local receives, owner = stream_receives(s, group, ARGV[i])
  if receives > 0 and owner == consumer then
    redis.call('XCLAIM', s.events, group, consumer, 0, ARGV[i], 'JUSTID')
    renewed = renewed + 1
  end
end
-- Only a flag that is still held is extended: a drain whose last read released it (nothing
-- left) must not re-arm it, or the next publish would find it held and send no drain job.
redis.call('SET', s.drains, 1, 'XX', 'PX', drain_lease_ms)
return renewed
