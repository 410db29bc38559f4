-- Append one entry to the stream under the cap; returns its id and how many entries the cap
-- trimmed away (XLEN before + 1 - XLEN after: exact, whatever approximate trimming removed).
local function stream_append(s, maxlen, payload, key, to)
  local before = redis.call('XLEN', s.events)
  local seq = redis.call('HINCRBY', s.stats, 'seq', 1)
  local args = {'XADD', s.events}
  if maxlen > 0 then
    args[#args + 1] = 'MAXLEN'; args[#args + 1] = '~'; args[#args + 1] = maxlen
  end
  args[#args + 1] = '*'
  args[#args + 1] = 'd'; args[#args + 1] = payload
  args[#args + 1] = 'n'; args[#args + 1] = seq
  if key ~= '' then args[#args + 1] = 'k'; args[#args + 1] = key end
  if to ~= '' then args[#args + 1] = 'to'; args[#args + 1] = to end
  local id = redis.call(unpack(args))
  local trimmed = before + 1 - redis.call('XLEN', s.events)
  if trimmed > 0 then redis.call('HINCRBY', s.stats, 'trimmed', trimmed) end
  return id, trimmed
end
