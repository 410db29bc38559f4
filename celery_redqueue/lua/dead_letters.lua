-- Reading dead letters ("json NL payload") before acting on any (spliced in by pool_dead.lua and
-- bucket_dead.lua after their common file): one that cannot be parsed stays listed.

-- The letters to act on: the exact entries argv[first], argv[first + 1], ... (a script's ARGV)
-- when the caller names some, else the oldest `limit` of the list `dead` (-1: the oldest 1000).
local function dead_candidates(dead, argv, first, limit)
  if #argv < first then
    if limit < 0 then limit = 1000 end
    return redis.call('LRANGE', dead, 0, limit - 1)
  end
  local named = {}
  for i = first, #argv do named[#named + 1] = argv[i] end
  return named
end

-- A letter's metadata (a table) and payload; nil when it cannot be parsed.
local function parse_letter(entry)
  local newline = string.find(entry, '\n', 1, true)
  if not newline then return nil end
  local ok, info = pcall(cjson.decode, string.sub(entry, 1, newline - 1))
  if not ok or type(info) ~= 'table' then return nil end
  return info, string.sub(entry, newline + 1)
end
