-- What call `id` did, or false when it is not recorded (it never ran, or over a minute ago).
-- (Call records: see record_call.lua.)
local function recorded(records, id)
  return redis.call('HGET', records, id)
end
