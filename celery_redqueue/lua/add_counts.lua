-- Add each non-zero count of `counts` (field -> n) to the hash `stats`. Zero is skipped: Lua
-- formats a negative zero as "-0", which HINCRBY refuses.
local function add_counts(stats, counts)
  for field, n in pairs(counts) do
    if n ~= 0 then redis.call('HINCRBY', stats, field, n) end
  end
end
