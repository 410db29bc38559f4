-- The heartbeat of a worker: push the deadline of each id still in the in-flight zset to
-- now + `timeout` (XX: an id the reaper took back stays gone) and renew the drain flag if a
-- job holds it. Returns the ids that were no longer in flight.
-- (The drain flag and its lease: see plan_drain.lua.)
local function renew_inflight(inflight, drains, lease, ids, timeout, now)
  local missing = {}
  for _, id in ipairs(ids) do
    if redis.call('ZADD', inflight, 'XX', 'CH', now + timeout, id) == 0
        and not redis.call('ZSCORE', inflight, id) then
      missing[#missing + 1] = id
    end
  end
  redis.call('PEXPIRE', drains, lease)
  return missing
end
