-- Wake up to `n` clients waiting on leases.notify (BLPOP). The list never holds more entries
-- than there are resources (leases.resources), and disappears when nobody has waited for a
-- minute.
local function lease_wake(leases, n)
  if n <= 0 then return end
  for _ = 1, n do redis.call('RPUSH', leases.notify, 1) end
  redis.call('LTRIM', leases.notify, -redis.call('SCARD', leases.resources), -1)
  redis.call('PEXPIRE', leases.notify, 60000)
end
