-- Call records (spliced in at "--#include recorded"): see record_call.lua.
-- What call `id` did, or false when it is not recorded (it never ran, or over a minute ago).
local function recorded(records, id)
  return redis.call('HGET', records, id)
end
