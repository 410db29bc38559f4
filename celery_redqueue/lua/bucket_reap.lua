-- Return reservations whose deadline passed to the head of their key's queue and make the key
-- eligible again; past max receives the item goes to the dead-letter list instead.
-- KEYS[1..26]: the bucket's keys (bucket_common.lua names each).
-- ARGV[1..7]: the bucket's settings (bucket_common.lua).
-- ARGV[8] most reservations to reap in this call.
-- Reply: {returned, dead_lettered, send_drain}. Bounded: O(limit * log K).
-- Lost reply: safe to run twice (a second run takes back only what expired since; a drain job
-- the lost reply asked for is sent by the next reaper run)
--#include bucket_common
local limit = tonumber(ARGV[8])
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', K_INFLIGHT, '-inf', now, 'LIMIT', 0, limit)
local returned, buried = 0, 0
for _, reservation in ipairs(expired) do
  local key, slot = take_reservation(reservation)
  if key and slot then
    local receives = parse_slot(slot)
    if not receives then
      bury(key, slot, 'malformed entry: unreadable reserved slot', now)
      buried = buried + 1
      make_eligible(key, now)
    elseif receives >= MAX_RECEIVES then
      bury(key, slot, 'reservation expired ' .. receives .. ' times', now)
      buried = buried + 1
      -- An ordered key waited for this item: its next one may go now.
      make_eligible(key, now)
    else
      push_head(key, slot)
      -- The published design lost such items when their key had left the ready set.
      make_eligible(key, now)
      returned = returned + 1
    end
  else
    redis.call('ZREM', K_INFLIGHT, reservation)
  end
end
if returned > 0 then redis.call('HINCRBY', K_STATS, 'reaped', returned) end
-- Items that may go need a drain job even if the dead drain's lease has not run out yet; work
-- under no lease needs one too (drain_lease.lua's rearm_drain): a key or delayed item due now,
-- or later with no drain job scheduled for it (the sent drain schedules one).
local due = false
for _, zset in ipairs({K_READY, K_SCHEDULED}) do
  local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if #first > 0 and (tonumber(first[2]) <= now or redis.call('EXISTS', K_WAKE) == 0) then
    due = true
  end
end
local send = rearm_drain(K_DRAINS, DRAIN_LEASE_MS, #expired > 0, due)
return {returned, buried, send}
