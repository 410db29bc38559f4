-- Keep a popped batch in flight (spliced in at "--#include pool_hold"): `calls` calls under
-- `batch_id` until now + `timeout_ms`, its `record` packed as pool_unpack_batch.lua reads it
-- (kept at most once too, so that a re-sent pop can reply it; only the reaper of an
-- at-least-once pool returns its entries). Returns the fan-out (1: send one more drain job,
-- while more batches of `n` wait than drains run, up to `max_drains`) and the entries left.
--#include claim_drain
local function pool_hold(pool, batch_id, calls, record, timeout_ms, max_drains, n, now)
  redis.call('ZADD', pool.inflight, now + timeout_ms, batch_id)
  redis.call('HSET', pool.inflight_calls, batch_id, calls)
  redis.call('HSET', pool.inflight_items, batch_id, record)
  redis.call('HINCRBY', pool.stats, 'in_flight', calls)
  local remaining = redis.call('ZCARD', pool.items)
  return claim_drain(pool.drains, pool.lease, max_drains, remaining / n), remaining
end
