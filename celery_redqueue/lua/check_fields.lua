-- A script's check of the per-key numbers it will write, before its first write (spliced in at
-- "--#include check_fields"; check_keys.lua checks the keys' types): `pairs` lists a hash, a
-- field, a hash, a field, ...; a field present that does not hold an integer fails the script
-- with CORRUPT and the hash and field named, nothing written.
local function check_fields(pairs_)
  for i = 1, #pairs_, 2 do
    local v = redis.call('HGET', pairs_[i], pairs_[i + 1])
    if v and not string.match(v, '^%-?%d+$') then error(string.format('CORRUPT %s field %q: %q is not an integer', pairs_[i], pairs_[i + 1], v), 0) end
  end
end
