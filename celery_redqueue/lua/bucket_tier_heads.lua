-- Priority tiers (a bucket with a priority bound, b.priority_bound > 0): a call's tier, 0 to 9
-- (higher goes first), is in its slot (bucket_make_slot.lua) and picks its key's sub-queue:
-- b.heads / b.tails field `key` for tier 0 (as on every bucket), "key NUL tier" for tiers 1-9
-- (bucket_queue.lua), its slots at "queue NUL position" in b.items. b.tails "key NUL tiers" is
-- the bitmask of the tiers holding calls (bucket_mask.lua, bucket_set_tier.lua). While a key
-- whose highest tier is above 0 is in b.ready, b.urgent holds it at band(tier) + its ready score
-- (bucket_sync_urgent.lua), so that a poll finds the eligible key of the highest tier with one
-- range read per tier (bucket_next_key.lua). Without a bound every call is tier 0 and none of
-- this is read or written.
-- Returns the tiers holding calls, highest first ({tier, head position, tail position, offered
-- ms of the head} each), the key's depth over all of them and the oldest head's offered ms.
--#include bucket_mask
--#include bucket_queue
local function bucket_tier_heads(b, key)
  local mask, rows, depth, oldest = bucket_mask(b, key), {}, 0, nil
  for tier = 9, 0, -1 do if bit.band(mask, bit.lshift(1, tier)) ~= 0 then
    local q = bucket_queue(key, tier)
    local head, tail = tonumber(redis.call('HGET', b.heads, q) or '0') or 0, tonumber(redis.call('HGET', b.tails, q) or '0') or 0
    local at = tonumber(string.match(redis.call('HGET', b.items, q .. '\0' .. head) or '', '^%d+:%d+:(%d+)') or '') or 0
    rows[#rows + 1], depth, oldest = {tier, head, tail, at}, depth + tail - head, math.min(oldest or at, at)
  end end
  return rows, depth, oldest
end
