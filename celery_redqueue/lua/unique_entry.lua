-- The one way a unique script reads a held entry (spliced in at "--#include unique_entry"): one
-- that is not a lock's JSON fails the script with "CORRUPT ..." before it writes.
local function unique_entry(locks, key, raw)
  if not raw then return nil end
  local ok, entry = pcall(cjson.decode, raw)
  if not ok or type(entry) ~= 'table' or type(entry.token) ~= 'string' then
    error('CORRUPT ' .. locks.held .. ' field ' .. key .. ' is not a lock entry', 0)
  end
  return entry
end
