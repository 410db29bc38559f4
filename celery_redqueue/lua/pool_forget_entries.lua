-- Take entries (positions `gone` of `e`, from pool_read_entries) out of `pool` (a pool_keys
-- table) with everything kept about them (spliced in at "--#include pool_forget_entries").
--#include over_chunks
--#include pool_depart
local function pool_forget_entries(pool, e, gone)
  if #gone == 0 then return end
  local members, slots = {}, {}
  for j, i in ipairs(gone) do
    members[j] = e.member[i]
    local slot = e.slot[i]
    if slot then slots[slot] = (slots[slot] or 0) + 1 end
  end
  over_chunks('ZREM', pool.items, members)
  over_chunks('HDEL', pool.receives, members)
  if pool.coalesce or redis.call('EXISTS', pool.counts) == 1 then
    over_chunks('HDEL', pool.counts, members)
  end
  if pool.coalesce then
    over_chunks('ZREM', pool.ages, members)
  else
    pool_depart(pool.ages, pool.arrivals, slots)
  end
end
