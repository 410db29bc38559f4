-- Reading stored pool entries, checked before anything is written (spliced in by the loader at
-- "--#include pool_entries", after pool_common). Redis keeps the writes of a script that fails
-- half-way, so a malformed entry is found first and dead-lettered, never half-handled.

-- Everything kept about a waiting entry, or .bad (the reason) when it cannot be parsed.
local function read_entry(member, score, now)
  local id, payload = parse_member(member)
  local receives = tonumber(redis.call('HGET', K_RECEIVES, member) or '0')
  local entry = {member = member, score = tonumber(score), count = count_of(member),
                 receives = (receives or 0) + 1, id = id, payload = payload,
                 offered_at = tonumber(redis.call('ZSCORE', K_AGES, member) or now) or now}
  if not id then entry.bad = 'malformed entry: no id prefix' end
  if not receives then entry.bad = 'malformed entry: receive count is not a number' end
  return entry
end


-- Offer up to `n` due delayed calls, in due order; a malformed one is dead-lettered (counted
-- as offered, accepted and dead, so the identities hold). Returns how many were malformed.
local function offer_due(n, now)
  local due = redis.call('ZRANGEBYSCORE', K_SCHEDULED, '-inf', now, 'LIMIT', 0, n)
  if #due == 0 then return 0 end
  local parsed = {}
  for i, entry in ipairs(due) do
    local seq, score, payload = string.match(entry, '^(%x+):([^:]*):(.*)$')
    parsed[i] = {seq = seq, score = tonumber(score), payload = payload}
  end
  local accepted, rejected, evicted, depth, malformed = 0, 0, 0, 0, 0
  for i, entry in ipairs(due) do
    redis.call('ZREM', K_SCHEDULED, entry)
    local p = parsed[i]
    if not p.seq or not p.score then
      bury(entry, 1, 0, 'malformed entry: unreadable delayed call', now)
      accepted, malformed = accepted + 1, malformed + 1
    else
      local member, sc = p.payload, p.score
      if not COALESCE then member = p.seq .. ':' .. p.payload end
      if POLICY ~= 'sample' then sc = tonumber(p.seq, 16) end
      local status, out = admit(member, sc, 1, 0, now)
      evicted, depth = evicted + out, depth - out
      if status > 0 then accepted, depth = accepted + 1, depth + 1 else rejected = rejected + 1 end
    end
  end
  redis.call('HINCRBY', K_STATS, 'delayed', -#due)
  redis.call('HINCRBY', K_STATS, 'offered', #due)
  redis.call('HINCRBY', K_STATS, 'accepted', accepted)
  redis.call('HINCRBY', K_STATS, 'rejected', rejected)
  redis.call('HINCRBY', K_STATS, 'evicted', evicted)
  redis.call('HINCRBY', K_STATS, 'depth', depth)
  tick(K_FLOW, 'in', #due, now)
  return malformed
end
