-- When the bucket next has work: the earliest of the first eligible key (b.ready) and the
-- first due delayed item (b.scheduled), nil when none. Then plan the drain job that work needs
-- (plan_drain.lua). Returns send_now (0|1) and schedule_in_ms (-1: none).
--#include plan_drain
local function bucket_plan_drain(b, now)
  local next_at = nil
  for _, zset in ipairs({b.ready, b.scheduled}) do
    local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
    if #first > 0 and (next_at == nil or tonumber(first[2]) < next_at) then
      next_at = tonumber(first[2])
    end
    -- A key eligible now settles it: the delayed set is not read then.
    if next_at ~= nil and next_at <= now then break end
  end
  return plan_drain(b.drains, b.wake, b.lease, now, next_at)
end
