-- Requeue or purge dead letters of a bucket.
-- KEYS, ARGV[1..7]: the bucket's keys and settings (bucket_keys.lua).
-- ARGV[8] action: requeue | purge
-- ARGV[9] how many from the oldest when no entries are named
-- ARGV[10], ... exact dead-letter entries to act on (as listed); none: the oldest ARGV[9]
-- Requeued items go to the tail of their key's queue with their receive count reset.
-- Reply: {items acted on, send_drain}. Bounded: O(entries * log K).
-- Lost reply: safe to run twice (the package names the exact letters: a second run finds them
-- gone)
--#include bucket_keys
--#include clock
--#include plan_drain
--#include bucket_statuses
--#include bucket_make_slot
--#include bucket_append
--#include dead_candidates
--#include parse_letter
--#include check_keys
--#include check_fields
local b = bucket_keys(KEYS, ARGV)
local action, oldest = ARGV[8], tonumber(ARGV[9])
local now = now_ms()
-- Every key it may write (a requeue appends), before its first write (check_keys.lua: a key
-- of another type or a stats counter that is not an integer is CORRUPT, nothing written).
check_keys({b.urgent, 'zset', b.dead, 'list', b.keystats, 'hash', b.items, 'hash', b.heads, 'hash',
  b.tails, 'hash', b.ready, 'zset', b.ages, 'zset', b.tat, 'hash', b.rates, 'hash',
  b.paused, 'zset', b.inflight, 'zset', b.drains, 'string', b.wake, 'string'}, b.stats)
-- Read and check every dead letter before removing any: one that cannot be parsed (or, to
-- requeue, has no key: an unreadable delayed item) stays listed when requeued and is deleted
-- (counted as one item) when purged.
local parsed = {}
for _, entry in ipairs(dead_candidates(b.dead, ARGV, 10, oldest)) do
  local info, payload = parse_letter(entry)
  if info and type(info['key']) == 'string' and (action ~= 'requeue' or info['key'] ~= '') then
    parsed[#parsed + 1] = {entry = entry, key = info['key'], payload = payload,
                           cost = tonumber(info['cost'])}
  elseif action == 'purge' then
    parsed[#parsed + 1] = {entry = entry, key = false}
  end
end
local fields = {}
for _, p in ipairs(parsed) do
  if p.key then
    local n = #fields
    fields[n + 1], fields[n + 2] = b.keystats, p.key .. '\0dead'
    fields[n + 3], fields[n + 4] = b.keystats, p.key .. '\0in_flight'
    fields[n + 5], fields[n + 6], fields[n + 7], fields[n + 8] = b.heads, p.key, b.tails, p.key
  end
end
check_fields(fields)
local entries, requeued = {}, 0
for _, p in ipairs(parsed) do
  if redis.call('LREM', b.dead, 1, p.entry) == 1 then entries[#entries + 1] = p end
end
for _, p in ipairs(entries) do
  local key, payload, cost = p.key, p.payload, p.cost
  if key then redis.call('HINCRBY', b.keystats, key .. '\0dead', -1) end
  if action == 'requeue' then
    local id = redis.call('HINCRBY', b.stats, 'seq', 1)
    if bucket_append(b, key, bucket_make_slot(0, id, now, payload, cost), now) ~= REFUSED then
      requeued = requeued + 1
    else
      redis.call('HINCRBY', b.stats, 'rejected', 1)
    end
  end
end
if #entries == 0 then return {0, 0} end
redis.call('HINCRBY', b.stats, 'dead', -#entries)
if action == 'purge' then redis.call('HINCRBY', b.stats, 'purged', #entries) end
if requeued > 0 then redis.call('HINCRBY', b.stats, 'requeued', requeued) end
local send = 0
if requeued > 0 then send = (plan_drain(b.drains, b.wake, b.lease, now, now)) end
return {#entries, send}
