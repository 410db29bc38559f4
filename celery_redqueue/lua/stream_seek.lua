-- Move a group's read position (replay or skip): the next entry it reads is the first one at
-- or after ARGV[3] ('start': the oldest kept; 'end': whatever is published next).
-- Entries already pending for the group stay pending. The group is created if needed.
-- KEYS[1..12]: see stream_keys.lua (stream, then the group's keys).
-- ARGV[1] group, ARGV[2] kind: start | end | id, ARGV[3] entry id (kind id; a time is passed
-- as "<ms>-0").
-- Reply: {last delivered id now set, entries the group will read from there}.
-- Lost reply: safe to run twice (sets the same position again)
--#include stream_keys
--#include stream_check
--#include stream_fields
--#include stream_ensure_group
--#include clock
local s = stream_keys(KEYS, true)
stream_check(s)
local group, kind, target = ARGV[1], ARGV[2], ARGV[3]
if kind ~= 'start' and kind ~= 'end' and kind ~= 'id' then
  return redis.error_reply('ERR stream_seek: kind must be start, end or id')
end
if kind == 'id' and not string.match(target or '', '^%d+%-%d+$') then
  return redis.error_reply('ERR stream_seek: malformed entry id')
end
local now = now_ms()
stream_ensure_group(s, group, s.gstats, now)
local seq = tonumber(redis.call('HGET', s.stats, 'seq') or '0')
local last_id, last_seq = '0-0', nil
if kind == 'end' then
  last_id, last_seq = '$', seq
elseif kind == 'id' then
  local before = redis.call('XREVRANGE', s.events, '(' .. target, '-', 'COUNT', 1)
  if #before > 0 then
    last_id = before[1][1]
    last_seq = tonumber(stream_fields(before[1][2])['n'])
  end
end
if not last_seq then
  -- Before the first entry kept: the group reads from the oldest one, and what the cap
  -- trimmed earlier is not counted as missed.
  local first = redis.call('XRANGE', s.events, '-', '+', 'COUNT', 1)
  if #first > 0 then last_seq = tonumber(stream_fields(first[1][2])['n']) - 1 else last_seq = seq end
end
redis.call('XGROUP', 'SETID', s.events, group, last_id)
redis.call('HSET', s.gstats, 'last_seq', last_seq, 'cursor', '0-0')
if kind == 'end' then
  last_id = redis.call('XREVRANGE', s.events, '+', '-', 'COUNT', 1)[1]
  last_id = last_id and last_id[1] or '0-0'
end
return {last_id, seq - last_seq}
