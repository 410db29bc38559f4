-- Remove resources from a pool.
-- KEYS[1] resources  set: every resource of the pool
-- KEYS[2] free       zset: free resource -> when it became free (ms)
-- ARGV[1..n] resource names
-- Returns how many were in the pool. A leased one stays with its holder until released or
-- expired, and then leaves instead of becoming free. Bounded: O(n log N).
local removed = 0
for i = 1, #ARGV do
  if redis.call('SREM', KEYS[1], ARGV[i]) == 1 then
    removed = removed + 1
    redis.call('ZREM', KEYS[2], ARGV[i])
  end
end
return removed
