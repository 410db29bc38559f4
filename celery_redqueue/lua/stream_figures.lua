-- Read what one group's figures need, in one step on the stream's node (one clock).
-- KEYS[1..12]: see stream_common.lua (stream, then the group's keys).
-- ARGV[1] group.
-- Reply: {stream stats flat, group stats flat, stream flow flat, group flow flat,
-- pending count, oldest pending id or '', sequence number of the oldest kept entry or '',
-- stream length, now ms, group exists (1|0)}. Bounded: hashes of a few dozen fields, flow hashes of
-- ~180 fields per kind, XPENDING's summary form.
-- Lost reply: safe to run twice (read-only)
--#include stream_common
local group = ARGV[1]
local exists = redis.call('HEXISTS', K_GROUPS, group)
local pending, oldest = 0, ''
if exists == 1 and redis.call('EXISTS', K_EVENTS) == 1 then
  local summary = redis.call('XPENDING', K_EVENTS, group)
  pending, oldest = summary[1], summary[2] or ''
end
local first = redis.call('XRANGE', K_EVENTS, '-', '+', 'COUNT', 1)
local first_seq = ''
if #first > 0 then first_seq = fields_of(first[1][2])['n'] end
return {
  redis.call('HGETALL', K_STATS),
  redis.call('HGETALL', K_GSTATS),
  redis.call('HGETALL', K_FLOW),
  redis.call('HGETALL', K_GFLOW),
  pending,
  oldest,
  first_seq,
  redis.call('XLEN', K_EVENTS),
  string.format('%.17g', now_ms()),
  exists,
}
