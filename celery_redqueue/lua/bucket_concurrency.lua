-- A key's concurrency limit: its own (b.rates "key NUL conc", set_concurrency) or the bucket's
-- (b.concurrency; 0: none). A value that is not an integer >= 1 reads as the bucket's.
local function bucket_concurrency(b, key)
  local own = tonumber(redis.call('HGET', b.rates, key .. '\0conc') or '')
  return (own and own >= 1 and own == math.floor(own)) and own or b.concurrency
end
