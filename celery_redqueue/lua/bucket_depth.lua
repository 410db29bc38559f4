-- How many items a key's queue holds (b.heads and b.tails: its first and next positions).
local function bucket_depth(b, key)
  return tonumber(redis.call('HGET', b.tails, key) or '0') - tonumber(redis.call('HGET', b.heads, key) or '0')
end
