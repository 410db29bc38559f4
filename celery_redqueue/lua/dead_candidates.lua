-- Reading dead letters ("json NL payload") before acting on any (spliced in at
-- "--#include dead_candidates").
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
