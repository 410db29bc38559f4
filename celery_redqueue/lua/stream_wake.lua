-- The reaper's look at one group: arm its drain flag (when none is held) if the group has
-- unread entries, held entries come free, or entries pending longer than the visibility
-- timeout. Nothing is claimed here: the drain job claims them (with their delivery count).
-- KEYS[1..12]: see stream_keys.lua (stream, then the group's keys).
-- ARGV[1] group, ARGV[2] visibility timeout ms, ARGV[3] drain lease ms, ARGV[4] arm (1|0):
-- 0 only reports (nobody would serve the flag), ARGV[5] idle ms after which a consumer with
-- nothing pending is forgotten (every worker process is a consumer, so they would pile up;
-- one that comes back is simply created again).
-- Reply: {armed (1|0), claimable entries seen (at most 100), unread entries, consumers
-- forgotten}. Bounded: O(consumers of the group), at most 100 forgotten per call.
-- Lost reply: safe to run twice (a second run finds the flag armed and reports it not armed:
-- that group's drain waits one drain lease for the next reaper run)
--#include stream_keys
--#include stream_check
--#include stream_fields
--#include stream_held
local s = stream_keys(KEYS, true)
stream_check(s)
local group, visibility, drain_lease_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local arm, forget_after = ARGV[4] == '1', tonumber(ARGV[5])
if not visibility or not drain_lease_ms or not forget_after then
  return redis.error_reply('ERR stream_wake: malformed arguments')
end
if redis.call('HEXISTS', s.groups, group) == 0 or redis.call('EXISTS', s.events) == 0 then
  return {0, 0, 0, 0}
end
local claimable = #redis.call('XPENDING', s.events, group, 'IDLE', visibility, '-', '+', 100)
local seq = tonumber(redis.call('HGET', s.stats, 'seq') or '0')
local unread = seq - tonumber(redis.call('HGET', s.gstats, 'last_seq') or '0')
if unread < 0 then unread = 0 end
local ready = redis.call('LLEN', s.ready)
local armed = 0
if arm and claimable + unread + ready > 0 then
  armed = redis.call('SET', s.drains, 1, 'NX', 'PX', drain_lease_ms) and 1 or 0
end
local forgotten = 0
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', s.events, group)) do
  local c = stream_fields(consumer)
  if forgotten < 100 and c['name'] ~= HELD and tonumber(c['pending']) == 0
    and tonumber(c['idle']) > forget_after then
    redis.call('XGROUP', 'DELCONSUMER', s.events, group, c['name'])
    forgotten = forgotten + 1
  end
end
return {armed, claimable, unread, forgotten}
