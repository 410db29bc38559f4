-- The three sources a read hands entries out from (spliced in by stream_read.lua). Each takes
-- the read's state `r`: group, consumer, n, visibility, max_receives, guard, ordered, now,
-- out (the reply being built) and handed (entries in it).
--#include stream_common

local function hand(r, id, f, receives)
  r.out[#r.out + 1] = id
  r.out[#r.out + 1] = f['d']
  r.out[#r.out + 1] = receives
  r.out[#r.out + 1] = f['k'] or ''
  r.handed = r.handed + 1
end

-- A pending entry that is no longer to be handed out: acknowledge it and free its key.
local function drop(r, id)
  redis.call('XACK', K_EVENTS, r.group, id)
  if r.ordered then release_key(id) end
end

-- A pending entry handed out (again), `counted` times so far: trimmed, guarded or worn out
-- entries are settled instead; otherwise the consumer owns it with its new count.
local function redeliver(r, id, f, counted)
  if not f then
    drop(r, id)  -- the cap trimmed it before it was acknowledged: nothing left to deliver
    redis.call('HINCRBY', K_GSTATS, 'lost', 1)
  elseif r.guard and redis.call('ZSCORE', K_DONE, id) then
    drop(r, id)
    redis.call('HINCRBY', K_GSTATS, 'guard_skipped', 1)
  elseif counted + 1 > r.max_receives then
    bury(r.group, id, f, counted, 'not acknowledged after ' .. counted ..
      ' receives (visibility timeout ' .. r.visibility .. ' ms)', r.now)
    drop(r, id)
  else
    redis.call('XCLAIM', K_EVENTS, r.group, r.consumer, 0, id,
      'RETRYCOUNT', counted + 1, 'JUSTID')
    if counted > 0 then redis.call('HINCRBY', K_GSTATS, 'redelivered', 1) end
    hand(r, id, f, counted + 1)
  end
end

-- Ordered groups: held entries whose key came free (parked with 0 receives).
local function take_ready(r)
  while r.ordered and r.handed < r.n and not r.alone do
    local id = redis.call('LPOP', K_READY)
    if not id then return end
    redeliver(r, id, entry_of(id), receives_of(r.group, id))
  end
end

-- Entries pending longer than the visibility timeout (XAUTOCLAIM from the saved cursor, one at
-- a time; JUSTID so that the count is set here). Each was handed out before, to a batch that
-- died or failed, so it is handed out alone (r.alone): the read claims only while it holds
-- nothing, and one claimed entry ends it, so a call that killed its batch's process cannot
-- take good calls down with it again. Returns true when more may be claimable.
local function take_claimed(r)
  if r.handed > 0 then return false end
  local cursor, claimed_any = redis.call('HGET', K_GSTATS, 'cursor') or '0-0', false
  for _ = 1, r.n do
    local claimed = redis.call('XAUTOCLAIM', K_EVENTS, r.group, r.consumer, r.visibility, cursor,
      'COUNT', 1, 'JUSTID')
    cursor = claimed[1]
    for _, id in ipairs(claimed[2]) do
      claimed_any = true
      local f = entry_of(id)
      if r.ordered and f and f['k'] and redis.call('ZSCORE', K_HELD, held_member(f['k'], id)) then
        -- Still waiting for its key: back to the held consumer, count untouched.
        redis.call('XCLAIM', K_EVENTS, r.group, HELD, 0, id, 'JUSTID')
      else
        redeliver(r, id, f, receives_of(r.group, id))
      end
    end
    if r.handed > 0 or cursor == '0-0' then break end
  end
  r.alone = r.handed > 0
  redis.call('HSET', K_GSTATS, 'cursor', cursor)
  return claimed_any and cursor ~= '0-0'
end
