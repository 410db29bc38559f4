-- Read what one group's figures need, in one step on the stream's node (one clock).
-- KEYS[1..12]: see stream_keys.lua (stream, then the group's keys).
-- ARGV[1] group.
-- Reply: {stream stats flat, group stats flat, stream flow flat, group flow flat,
-- pending count, oldest pending id or '', sequence number of the oldest kept entry or '',
-- stream length, now ms, group exists (1|0)}. Bounded: hashes of a few dozen fields, flow hashes of
-- ~180 fields per kind, XPENDING's summary form.
-- Lost reply: safe to run twice (read-only)
--#include stream_keys
--#include stream_check
--#include stream_fields
--#include clock
local s = stream_keys(KEYS, true)
stream_check(s)
local group = ARGV[1]
local exists = redis.call('HEXISTS', s.groups, group)
local pending, oldest = 0, ''
if exists == 1 and redis.call('EXISTS', s.events) == 1 then
  local summary = redis.call('XPENDING', s.events, group)
  pending, oldest = summary[1], summary[2] or ''
end
local first = redis.call('XRANGE', s.events, '-', '+', 'COUNT', 1)
local first_seq = ''
if #first > 0 then first_seq = stream_fields(first[1][2])['n'] end
return {
  redis.call('HGETALL', s.stats),
  redis.call('HGETALL', s.gstats),
  redis.call('HGETALL', s.flow),
  redis.call('HGETALL', s.gflow),
  pending,
  oldest,
  first_seq,
  redis.call('XLEN', s.events),
  string.format('%.17g', now_ms()),
  exists,
}
