-- A reaper's drain: when work is due (`due`), send a drain if it took work back (`took_back`:
-- re-arm the flag even if the dead drain's lease has not run out yet), or if no drain holds
-- the flag (it expired over the work: a drain killed while it lingered, a call made while a
-- dead drain held the flag, a Redis restart under a drain). Returns send_drain (0|1).
-- (The drain flag and its lease: see plan_drain.lua.)
local function rearm_drain(drains, lease, took_back, due)
  if not due then return 0 end
  if took_back then
    redis.call('SET', drains, 1, 'PX', lease)
    return 1
  end
  if redis.call('SET', drains, 1, 'NX', 'PX', lease) then return 1 end
  return 0
end
