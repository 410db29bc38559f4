-- Entries pending longer than the visibility timeout (XAUTOCLAIM from the saved cursor, one at
-- a time; JUSTID so that the count is set here). Each was handed out before, to a batch that
-- died or failed, so it is handed out alone (r.alone): the read claims only while it holds
-- nothing, and one claimed entry ends it, so a call that killed its batch's process cannot
-- take good calls down with it again. Returns true when more may be claimable.
--#include stream_entry
--#include stream_receives
--#include stream_held
--#include stream_held_member
--#include stream_redeliver
local function stream_take_claimed(s, r)
  if r.handed > 0 then return false end
  local cursor, claimed_any = redis.call('HGET', s.gstats, 'cursor') or '0-0', false
  for _ = 1, r.n do
    local claimed = redis.call('XAUTOCLAIM', s.events, r.group, r.consumer, r.visibility, cursor,
      'COUNT', 1, 'JUSTID')
    cursor = claimed[1]
    for _, id in ipairs(claimed[2]) do
      claimed_any = true
      local f = stream_entry(s, id)
      if r.ordered and f and f['k'] and redis.call('ZSCORE', s.held, stream_held_member(f['k'], id)) then
        -- Still waiting for its key: back to the held consumer, count untouched.
        redis.call('XCLAIM', s.events, r.group, HELD, 0, id, 'JUSTID')
      else
        stream_redeliver(s, r, id, f, stream_receives(s, r.group, id))
      end
    end
    if r.handed > 0 or cursor == '0-0' then break end
  end
  r.alone = r.handed > 0
  redis.call('HSET', s.gstats, 'cursor', cursor)
  return claimed_any and cursor ~= '0-0'
end
