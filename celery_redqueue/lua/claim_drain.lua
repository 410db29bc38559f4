-- A drain job at work claims the drain flag (one started by beat finds none), renews its
-- lease, and asks for one more job while there is work for more jobs than are running
-- (`work` counts units of work, such as batches or eligible keys), up to `max_drains`.
-- Returns 1 when the caller should send one more drain job, else 0.
-- (The drain flag and its lease: see plan_drain.lua.)
local function claim_drain(drains, ttl, max_drains, work)
  local running = tonumber(redis.call('GET', drains) or '0') or 0
  if running <= 0 then
    running = 1
    redis.call('SET', drains, 1, 'PX', ttl)
  else
    redis.call('PEXPIRE', drains, ttl)
  end
  if running >= max_drains or work <= running then return 0 end
  redis.call('INCR', drains)
  return 1
end
