-- Shared by every structure's scripts (spliced in by the loader at "--#include common"): the
-- server clock, flow counters, the drain lease, call records, expiring ids and counter updates.
--#include clock
--#include flow
--#include drain_lease
--#include call_records

-- Forget up to 100 ids whose window ended (dedupe ids, processed-guard ids): bounded work per
-- call, and the zset cannot grow without limit.
local function forget_expired(zset, now)
  local old = redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then redis.call('ZREM', zset, unpack(old)) end
end

-- Add each non-zero count of `counts` (field -> n) to the hash `stats`. Zero is skipped: Lua
-- formats a negative zero as "-0", which HINCRBY refuses.
local function add_counts(stats, counts)
  for field, n in pairs(counts) do
    if n ~= 0 then redis.call('HINCRBY', stats, field, n) end
  end
end
