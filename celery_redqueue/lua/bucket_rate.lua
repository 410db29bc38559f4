-- A key's interval (ms between releases) and burst allowance (items), or the bucket's defaults
-- (b.rates, b.interval, b.burst); the third value is false when the key's stored rate is
-- malformed (the defaults are used then).
local function bucket_rate(b, key)
  local spec = redis.call('HGET', b.rates, key)
  local interval, burst = string.match(spec or '', '^(%S+) (%S+)$')
  interval, burst = tonumber(interval), tonumber(burst)
  if interval and burst and interval > 0 and burst >= 0 then return interval, burst, true end
  return b.interval, b.burst, not spec
end
