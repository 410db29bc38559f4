-- Offering calls to a pool (spliced in by pool_add.lua after pool_common): the calls are
-- ARGV[6], ARGV[7], ... in groups of 4 (score, payload, dedupe id, delay ms); each appends its
-- status to `result` and adds to the counters in `c`. (Calls with no dedupe id and no delay
-- never come here: pool_add_plain keeps them.)

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
        c.accepted, c.depth, c.evicted = c.accepted + 1, c.depth + 1 - out, c.evicted + out
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
