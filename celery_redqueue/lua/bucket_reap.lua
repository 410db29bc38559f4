-- Return reservations whose deadline passed to the head of their key's queue and make the key
-- eligible again; past max receives the item goes to the dead-letter list instead.
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] most reservations to reap in this call.
-- Reply: {returned, dead_lettered, send_drain}. Bounded: O(limit * log K).
-- Lost reply: safe to run twice (a second run takes back only what expired since; a drain job
-- the lost reply asked for is sent by the next reaper run)
--#include bucket_keys
--#include clock
--#include rearm_drain
--#include bucket_parse_slot
--#include bucket_take_reservation
--#include bucket_bury
--#include bucket_push_head
--#include bucket_make_eligible
--#include check_keys
--#include check_fields
local b = bucket_keys(KEYS, ARGV)
local limit = tonumber(ARGV[8])
local now = now_ms()
-- Every key it may write, before its first write (check_keys.lua: a key of another type or a
-- stats counter that is not an integer is CORRUPT, nothing written).
check_keys({b.urgent, 'zset', b.inflight, 'zset', b.res_keys, 'hash', b.res_items, 'hash', b.dead, 'list',
  b.keystats, 'hash', b.items, 'hash', b.heads, 'hash', b.tails, 'hash', b.ready, 'zset',
  b.ages, 'zset', b.tat, 'hash', b.rates, 'hash', b.paused, 'zset', b.scheduled, 'zset',
  b.drains, 'string', b.wake, 'string'}, b.stats)
local expired = redis.call('ZRANGEBYSCORE', b.inflight, '-inf', now, 'LIMIT', 0, limit)
local fields = {}
for i, key in ipairs(#expired > 0 and redis.call('HMGET', b.res_keys, unpack(expired)) or {}) do
  if key then
    local n = #fields
    fields[n + 1], fields[n + 2] = b.keystats, key .. '\0in_flight'
    fields[n + 3], fields[n + 4] = b.keystats, key .. '\0dead'
    fields[n + 5], fields[n + 6], fields[n + 7], fields[n + 8] = b.heads, key, b.tails, key
    -- With priority tiers, the call goes back to its tier's queue (bucket_push_head.lua).
    local tier = b.priority_bound > 0 and select(7, bucket_parse_slot(redis.call('HGET', b.res_items, expired[i]))) or 0
    if tier > 0 then
      n = #fields
      fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = b.heads, key .. '\0' .. tier, b.tails, key .. '\0' .. tier
      fields[n + 5], fields[n + 6] = b.tails, key .. '\0tiers'
    end
  end
end
check_fields(fields)
local returned, buried = 0, 0
for _, reservation in ipairs(expired) do
  local key, slot = bucket_take_reservation(b, reservation)
  if key and slot then
    local receives = bucket_parse_slot(slot)
    if not receives then
      bucket_bury(b, key, slot, 'malformed entry: unreadable reserved slot', now)
      buried = buried + 1
      bucket_make_eligible(b, key, now)
    elseif receives >= b.max_receives then
      bucket_bury(b, key, slot, 'reservation expired ' .. receives .. ' times', now)
      buried = buried + 1
      -- An ordered key waited for this item: its next one may go now.
      bucket_make_eligible(b, key, now)
    else
      bucket_push_head(b, key, slot)
      -- The published design lost such items when their key had left the ready set.
      bucket_make_eligible(b, key, now)
      returned = returned + 1
    end
  else
    redis.call('ZREM', b.inflight, reservation)
  end
end
if returned > 0 then redis.call('HINCRBY', b.stats, 'reaped', returned) end
-- Items that may go need a drain job even if the dead drain's lease has not run out yet; work
-- under no drain flag needs one too (rearm_drain.lua): a key or delayed item due now,
-- or later with no drain job scheduled for it (the sent drain schedules one).
local due = false
for _, zset in ipairs({b.ready, b.scheduled}) do
  local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if #first > 0 and (tonumber(first[2]) <= now or redis.call('EXISTS', b.wake) == 0) then
    due = true
  end
end
local send = rearm_drain(b.drains, b.lease, #expired > 0, due)
return {returned, buried, send}
