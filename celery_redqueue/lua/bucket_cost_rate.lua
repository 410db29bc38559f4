-- A key's cost interval (ms per unit), burst (units) and largest cost: its own (b.rates
-- "key NUL cost", set_cost_rate) or the bucket's.
local function bucket_cost_rate(b, key)
  local spec = redis.call('HGET', b.rates, key .. '\0cost')
  local i, bu, m = string.match(spec or '', '^(%S+) (%S+) (%S+)$')
  i, bu, m = tonumber(i), tonumber(bu), tonumber(m)
  if i and bu and m and i > 0 and bu >= 0 and m > 0 then return i, bu, m end
  return b.cost_interval, b.cost_burst, b.cost_max
end
