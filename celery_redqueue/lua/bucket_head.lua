-- A key's head item: its position (b.heads) and slot (b.items; nil when missing), and its tier:
-- on a bucket with priority tiers (bucket_tier_heads.lua), the head of its highest tier, unless
-- a lower tier's head has waited past the bound (the oldest such goes first: the starvation
-- bound within a key); else tier 0, the key's one queue.
--#include bucket_tier_heads
--#include bucket_queue
local function bucket_head(b, key, now)
  local tier = 0
  if b.priority_bound > 0 then
    local rows, _, oldest = bucket_tier_heads(b, key)
    tier = rows[1] and rows[1][1] or 0
    for _, row in ipairs(rows) do if row[4] == oldest and now - oldest > b.priority_bound then tier = row[1] end end
  end
  local q = bucket_queue(key, tier)
  local head = tonumber(redis.call('HGET', b.heads, q) or '0') or 0
  return head, redis.call('HGET', b.items, q .. '\0' .. head) or nil, tier
end
