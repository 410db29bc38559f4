-- Reading stored pool entries, checked before anything is written (spliced in by the loader at
-- "--#include pool_entries", after pool_common). Redis keeps the writes of a script that fails
-- half-way, so a malformed entry is found first and dead-lettered, never half-handled.

-- Run `cmd key ...` over `list` in chunks (unpack has a stack limit); the replies, joined.
local function over_chunks(cmd, key, list)
  local out = {}
  for from = 1, #list, 1000 do
    local part = redis.call(cmd, key, unpack(list, from, math.min(from + 999, #list)))
    if type(part) == 'table' then
      for j = 1, #part do out[from + j - 1] = part[j] end
    end
  end
  return out
end

-- The common pop's entries: fresh (no receive count kept anywhere, not coalescing, no guard),
-- so every one is delivered, one call each. `range` is a ZRANGE reply, its members `step`
-- apart (2: with scores). The members in order and the entries per arrival slot, or nil when
-- one is malformed (read_entries then sorts them out).
local function fresh_entries(range, step)
  local members, slots, k = {}, {}, 0
  for i = 1, #range, step do
    local member = range[i]
    local n = tonumber(string.match(member, '^(%x+):') or '', 16)
    if not n then return nil end
    k = k + 1
    members[k] = member
    local _, slot = arrival_of(n)
    slots[slot] = (slots[slot] or 0) + 1
  end
  return members, slots
end

-- Everything kept about the entries of a `ZRANGE ... WITHSCORES` reply, as one list per field
-- (not a table per entry: this runs for every popped entry), read in a few commands: member,
-- score, id, count, receives (this delivery included), held (a receives field exists),
-- offered_at, slot (arrival slot; not coalescing), bad (why it cannot be parsed) and, with
-- `guard`, done (its id completed within the processed-guard window).
local function read_entries(range, guard, now)
  local e = {member = {}, score = {}, id = {}, count = {}, receives = {}, held = {},
             offered = {}, slot = {}, bad = {}, done = {}}
  local k = #range / 2
  for i = 1, k do e.member[i], e.score[i] = range[2 * i - 1], tonumber(range[2 * i]) end
  local received = redis.call('EXISTS', K_RECEIVES) == 1 and over_chunks('HMGET', K_RECEIVES, e.member)
  local counts = COALESCE and over_chunks('HMGET', K_COUNTS, e.member)
  local ages = COALESCE and over_chunks('ZMSCORE', K_AGES, e.member)
  for i = 1, k do
    local id, n = id_of(e.member[i])
    local times = received and received[i]
    local receives = times and tonumber(times) or 0
    e.id[i], e.held[i], e.receives[i], e.count[i] = id or e.member[i], times and true, (receives or 0) + 1, 1
    if COALESCE then
      e.count[i] = tonumber(counts[i] or '1') or 1
      e.offered[i] = tonumber(ages[i] or now) or now
    elseif n then
      e.offered[i], e.slot[i] = arrival_of(n)
    end
    if not id then e.bad[i] = 'malformed entry: no id prefix' end
    if not receives then e.bad[i] = 'malformed entry: receive count is not a number' end
  end
  if guard then
    local done = over_chunks('ZMSCORE', K_DONE, e.id)
    for i = 1, k do e.done[i] = not e.bad[i] and done[i] and true end
  end
  return e
end

-- Take entries (positions `gone` of `e`, from read_entries) out of the pool with everything
-- kept about them; `all`: they are the whole range, the lowest #gone entries.
local function forget_entries(e, gone, all)
  if #gone == 0 then return end
  local members, held, slots = {}, {}, {}
  for j, i in ipairs(gone) do
    members[j] = e.member[i]
    if e.held[i] then held[#held + 1] = e.member[i] end
    local slot = e.slot[i]
    if slot then slots[slot] = (slots[slot] or 0) + 1 end
  end
  if all then
    redis.call('ZREMRANGEBYRANK', K_ITEMS, 0, #gone - 1)
  else
    over_chunks('ZREM', K_ITEMS, members)
  end
  if #held > 0 then over_chunks('HDEL', K_RECEIVES, held) end
  if COALESCE then
    over_chunks('HDEL', K_COUNTS, members)
    over_chunks('ZREM', K_AGES, members)
  else
    depart(K_AGES, K_ARRIVALS, slots)
  end
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
  -- A due call is offered now: a fresh id, so its age (and its FIFO place) counts from now.
  local seq = take_ids(K_STATS, #due, now)
  for i, entry in ipairs(due) do
    redis.call('ZREM', K_SCHEDULED, entry)
    local p = parsed[i]
    if not p.seq or not p.score then
      bury(entry, 1, 0, 'malformed entry: unreadable delayed call', now)
      accepted, malformed = accepted + 1, malformed + 1
    else
      local member, sc = p.payload, p.score
      if not COALESCE then member = string.format('%x', seq + i) .. ':' .. p.payload end
      if POLICY ~= 'sample' then sc = seq + i end
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
