-- A script's check of what it will write, before its first write (spliced in at
-- "--#include check_keys"): Redis does not roll back a script that fails half-way, so a key
-- that another program (or a corruption) left with another type, or a counter that is not an
-- integer (HINCRBY refuses it), fails the script here, with nothing written and the key and
-- field named (redis/client.py raises CorruptDataError for "CORRUPT").
-- `spec`: a key, the type it must hold ('zset', 'hash', 'list', 'string'; absent is fine), ...
-- `counters`: a hash whose every field must hold an integer (a stats hash), or nil.
local function check_keys(spec, counters)
  if counters then spec[#spec + 1], spec[#spec + 2] = counters, 'hash' end
  for i = 1, #spec, 2 do
    local kind = redis.call('TYPE', spec[i]).ok
    if kind ~= spec[i + 1] and kind ~= 'none' then error('CORRUPT ' .. spec[i] .. ' holds a ' .. kind .. ', not a ' .. spec[i + 1], 0) end
  end
  local fields = counters and redis.call('HGETALL', counters) or {}
  for i = 2, #fields, 2 do
    if not string.match(fields[i], '^%-?%d+$') then error(string.format('CORRUPT %s field %q: %q is not an integer', counters, fields[i - 1], fields[i]), 0) end
  end
end
