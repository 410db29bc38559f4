-- Everything kept about the entries of `pool` (a pool_keys table) in a ZRANGE WITHSCORES
-- reply, read before anything is written (spliced in at "--#include pool_read_entries"; Redis
-- keeps the writes of a script that fails half-way, so a malformed entry is found first and
-- dead-lettered, never half-handled). One list per field (not a table per entry: this runs for
-- every popped entry), read in a few commands: member, score, id, count (coalesced or
-- debounced), receives (this
-- delivery included), offered (ms), slot (arrival slot; not coalescing), bad (why it cannot be parsed) and, with `guard`, done (its id completed within
-- the processed-guard window).
--#include over_chunks
--#include pool_id
--#include pool_arrival
local function pool_read_entries(pool, range, guard, now)
  local e = {member = {}, score = {}, id = {}, count = {}, receives = {}, offered = {},
             slot = {}, bad = {}, done = {}}
  local k = #range / 2
  for i = 1, k do e.member[i], e.score[i] = range[2 * i - 1], tonumber(range[2 * i]) end
  local received = redis.call('EXISTS', pool.receives) == 1 and over_chunks('HMGET', pool.receives, e.member)
  local counts = (pool.coalesce or redis.call('EXISTS', pool.counts) == 1)
    and over_chunks('HMGET', pool.counts, e.member)
  local ages = pool.coalesce and over_chunks('ZMSCORE', pool.ages, e.member)
  for i = 1, k do
    local id, n = pool_id(e.member[i], pool.coalesce)
    -- A receive count that is not a number counts as none kept.
    local receives = tonumber(received and received[i]) or 0
    e.id[i], e.receives[i] = id or e.member[i], receives + 1
    e.count[i] = tonumber(counts and counts[i] or '1') or 1
    if pool.coalesce then
      e.offered[i] = tonumber(ages[i] or now) or now
    elseif n then
      e.offered[i], e.slot[i] = pool_arrival(n)
    else
      e.bad[i] = 'malformed entry: no id prefix'
    end
  end
  if guard then
    local done = over_chunks('ZMSCORE', pool.done, e.id)
    for i = 1, k do e.done[i] = not e.bad[i] and done[i] and true end
  end
  return e
end
