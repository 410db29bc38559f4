-- A re-sent pop (its first reply was lost; spliced in at "--#include pool_replay"): when batch
-- `batch_id` of `pool` (a pool_keys table) is in flight already, push its deadline to now +
-- `timeout_ms` and return the reply `result` (a pop's six status fields) completed with its
-- entries; else nil (pop as usual).
--#include pool_unpack_batch
--#include pool_reply_entries
local function pool_replay(pool, batch_id, timeout_ms, now, result)
  if redis.call('HEXISTS', pool.inflight_calls, batch_id) == 0 then return nil end
  local packed = redis.call('HGET', pool.inflight_items, batch_id) or ''
  local members, counts, receives = {}, {}, {}
  for i, e in ipairs(pool_unpack_batch(packed, nil, pool.coalesce) or {}) do
    members[i], counts[i], receives[i] = e[1], e[3], e[4]
  end
  result[3] = redis.call('ZCARD', pool.items)
  redis.call('ZADD', pool.inflight, 'XX', now + timeout_ms, batch_id)
  return pool_reply_entries(result, members, counts, receives)
end
