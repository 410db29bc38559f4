-- Reserve a released item until at_ms + timeout_ms (at_ms: its release slot, `now` or ahead of
-- it) and advance its key's schedules: GCRA from the key's own theoretical arrival time (so a
-- consumer late by less than the burst allowance loses no throughput, and none can exceed the
-- rate), its cost schedule by the call's cost (bucket_charge_cost.lua), the bucket's total schedule (b.tat "NUL total")
-- by one call. The key stays eligible, from the latest of its schedules and limits, while it has
-- items (`remaining`) and room for another call in flight. Counts the release for the
-- noisy-neighbour figures (b.releases; bucket_upkeep.lua rolls the minute). Returns the
-- reservation id and its deadline.
--#include bucket_rate
--#include bucket_charge_cost
--#include bucket_at_capacity
--#include bucket_limits_at
--#include bucket_make_slot
--#include bucket_turn
--#include bucket_ready
--#include bucket_unready
local function bucket_reserve(b, key, id, receives, at, payload, cost, remaining, timeout_ms, at_ms, now, tier)
  local interval, burst, ok = bucket_rate(b, key)
  if not ok then redis.log(redis.LOG_WARNING, 'redqueue: malformed rate of key ' .. key) end
  local tat = tonumber(redis.call('HGET', b.tat, key) or '0') or 0
  local next_tat = math.max(tat, at_ms) + interval
  redis.call('HSET', b.tat, key, string.format('%.17g', next_tat))
  local mark = bucket_charge_cost(b, key, cost or 1, at_ms)
  local total = b.total_interval > 0 and (tonumber(redis.call('HGET', b.tat, '\0total') or '0') or 0)
  if total then redis.call('HSET', b.tat, '\0total', string.format('%.17g', math.max(total, at_ms) + b.total_interval)) end
  redis.call('ZINCRBY', b.releases, 1, key)
  redis.call('HINCRBY', b.keystats, key .. '\0in_flight', 1)
  -- A weighted key whose turn goes on keeps its place (its score), its limits still apply.
  local keep = bucket_turn(b, key) and tonumber(redis.call('ZSCORE', b.ready, key) or '')
  local when = remaining > 0 and not bucket_at_capacity(b, key)
    and math.max(keep or next_tat - burst * interval, bucket_limits_at(b, key, now)) or math.huge
  if when < math.huge then bucket_ready(b, key, when) else bucket_unready(b, key) end
  local reservation, deadline = id .. '.' .. receives, at_ms + timeout_ms
  redis.call('ZADD', b.inflight, deadline, reservation)
  redis.call('HSET', b.res_keys, reservation, key)
  redis.call('HSET', b.res_items, reservation, bucket_make_slot(receives, id, at, payload, cost, mark, tier))
  redis.call('HINCRBY', b.stats, 'in_flight', 1)
  redis.call('HINCRBY', b.stats, 'receives', 1)
  if receives > 1 then redis.call('HINCRBY', b.stats, 'redelivered', 1) end
  return reservation, deadline
end
