-- Add resources to a pool; new ones are free at once and wake waiting clients.
-- KEYS[1] resources  set: every resource of the pool
-- KEYS[2] free       zset: free resource -> when it became free (ms); new ones score 0, so the
--                    never-used go first
-- KEYS[3] leased     zset: leased resource -> lease expiry (ms, server clock)
-- KEYS[4] notify     list: one entry per resource freed while clients may be waiting
-- ARGV[1..n] resource names
-- Returns how many were new. A name removed while leased and added again stays with its
-- holder and becomes free on release. Bounded: O(n log N).
local resources, free, leased, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local added = 0
for i = 1, #ARGV do
  local resource = ARGV[i]
  if redis.call('SADD', resources, resource) == 1 then
    added = added + 1
    if not redis.call('ZSCORE', leased, resource) then
      redis.call('ZADD', free, 0, resource)
      redis.call('RPUSH', notify, 1)
    end
  end
end
if added > 0 then
  redis.call('LTRIM', notify, -redis.call('SCARD', resources), -1)
  redis.call('PEXPIRE', notify, 60000)
end
return added
