-- Check a stream's keys (a stream_keys table `s`, with its group's keys when it has them) and
-- `more` (key, type, ... of keys the script names itself; nil: none) before a script's first
-- write (spliced in at "--#include stream_check"): a key of another type, a stats counter or a
-- group counter that is not an integer, or a group cursor that is not a stream id, stops the
-- script with "CORRUPT <key> ..." (check_keys.lua), nothing written.
--#include check_keys
local function stream_check(s, more)
  local spec = more or {}
  local kinds = {events = 'stream', flow = 'hash', groups = 'hash', dead = 'list', gstats = 'hash',
    gflow = 'hash', drains = 'string', done = 'zset', busy = 'hash', held = 'zset', ready = 'list',
    signal = 'list', listening = 'zset'}
  for part, kind in pairs(kinds) do
    if s[part] then spec[#spec + 1], spec[#spec + 2] = s[part], kind end
  end
  check_keys(spec, s.stats)
  local fields = s.gstats and redis.call('HGETALL', s.gstats) or {}
  for i = 1, #fields, 2 do
    local pattern = fields[i] == 'cursor' and '^%d+%-%d+$' or '^%-?%d+$'
    if not string.match(fields[i + 1], pattern) then
      error(string.format('CORRUPT %s field %q: %q is not a number', s.gstats, fields[i], fields[i + 1]), 0)
    end
  end
end
