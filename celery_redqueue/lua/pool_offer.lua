-- Offering calls to a pool (spliced in by pool_add.lua after pool_common): the calls are
-- ARGV[6], ARGV[7], ... in groups of 4 (score, payload, dedupe id, delay ms); each appends its
-- status to `result` and adds to the counters in `c`.

-- The common case in one ZADD per zset: plain calls (no dedupe id, no delay) that all fit in a
-- pool that does not coalesce are each kept as they come (status 1): nothing is evicted or
-- merged, so the per-call admission of offer_each would only repeat ZCARD.
local function offer_plain(seq, now, result, c)
  local entries, ages = {}, {}
  for i = 6, #ARGV, 4 do
    seq = seq + 1
    local member = string.format('%x:%s', seq, ARGV[i + 1])
    entries[#entries + 1] = POLICY == 'sample' and ARGV[i] or seq
    entries[#entries + 1] = member
    ages[#ages + 1] = now
    ages[#ages + 1] = member
    result[#result + 1] = 1
  end
  redis.call('ZADD', K_ITEMS, unpack(entries))
  redis.call('ZADD', K_AGES, unpack(ages))
  c.accepted, c.queued = c.accepted + (#ARGV - 5) / 4, c.queued + (#ARGV - 5) / 4
end

-- Every call on its own: refused as a duplicate, held until due, or admitted under the policy.
local function offer_each(seq, now, dedupe, window, result, c)
  for i = 6, #ARGV, 4 do
    local score, payload, dedupe_id, delay = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
    seq = seq + 1
    local status
    if dedupe and dedupe_id ~= '' and redis.call('ZSCORE', K_DEDUPE, dedupe_id) then
      status = 4
      c.duplicates, c.rejected = c.duplicates + 1, c.rejected + 1
    elseif delay > 0 then
      redis.call('ZADD', K_SCHEDULED, now + delay, string.format('%x', seq) .. ':' .. ARGV[i] .. ':' .. payload)
      status = 5
      c.delayed = c.delayed + 1
    else
      local member = payload
      if not COALESCE then member = string.format('%x:%s', seq, payload) end
      if POLICY ~= 'sample' then score = seq end
      local out
      status, out = admit(member, score, 1, 0, now)
      if status > 0 then
        c.accepted, c.queued, c.evicted = c.accepted + 1, c.queued + 1 - out, c.evicted + out
      else
        c.rejected = c.rejected + 1
      end
    end
    -- Remember the dedupe id only for a call that was taken: a refused call may be retried.
    if dedupe and dedupe_id ~= '' and status ~= 0 and status ~= 4 then
      redis.call('ZADD', K_DEDUPE, now + window, dedupe_id)
    end
    result[#result + 1] = status
  end
end
