-- Weighted fairness, deficit round robin over the ready set: a key of weight w (b.rates
-- "key NUL weight", set_weight; a number >= 1, absent: 1) releases w calls a turn where a key
-- of weight 1 releases one (a fraction carries over to its next turn, in b.tat "key NUL
-- credit"). Called at each release of the key; true: its turn goes on, and it keeps its place
-- in the ready set (the dequeue still checks its own schedules), else it goes to the back.
local function bucket_turn(b, key)
  local w = tonumber(redis.call('HGET', b.rates, key .. '\0weight') or '')
  if not w or w < 1 or w == math.huge then return false end
  local credit = tonumber(redis.call('HGET', b.tat, key .. '\0credit') or '') or 0
  credit = (credit < 1 and credit + w or credit) - 1  -- a new turn adds w; this release is 1
  redis.call('HSET', b.tat, key .. '\0credit', string.format('%.17g', credit))
  return credit >= 1
end
