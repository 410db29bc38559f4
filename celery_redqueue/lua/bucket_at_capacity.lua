-- The key has as many calls in flight as b.concurrency allows (reservations count, whoever
-- holds them; b.keystats "key NUL in_flight").
local function bucket_at_capacity(b, key)
  if b.concurrency <= 0 then return false end
  return tonumber(redis.call('HGET', b.keystats, key .. '\0in_flight') or '0') >= b.concurrency
end
