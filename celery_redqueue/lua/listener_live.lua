-- True while a listener's deadline is ahead of `now`.
-- (The wake signal: see wake_listener.lua.)
local function listener_live(listening, now)
  local last = redis.call('ZRANGE', listening, -1, -1, 'WITHSCORES')
  return #last > 0 and tonumber(last[2]) > now
end
