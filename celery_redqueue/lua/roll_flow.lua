-- Roll second fields of minutes before `before_minute` into their minute fields; drop minute
-- fields (and stray fields) older than the hour. O(fields), about once a minute.
-- (Flow counters: see tick.lua.)
local FLOW_MINUTES = 60
local function roll_flow(flow, before_minute)
  local sums, old = {}, {}
  local fields = redis.call('HGETALL', flow)
  for i = 1, #fields, 2 do
    local field = fields[i]
    local kind, is_minute, stamp = string.match(field, '^([^:]*):(m?)(%d+)$')
    stamp = tonumber(stamp)
    if field == 'rolled' then  -- the marker of the last roll stays
    elseif not stamp or (is_minute == 'm' and stamp <= before_minute - FLOW_MINUTES) then
      old[#old + 1] = field
    elseif is_minute == '' and math.floor(stamp / 60) < before_minute then
      -- A second of an ended minute: into its minute field, unless that minute is too old.
      local minute = math.floor(stamp / 60)
      if minute > before_minute - FLOW_MINUTES then
        local target = kind .. ':m' .. minute
        sums[target] = (sums[target] or 0) + (tonumber(fields[i + 1]) or 0)
      end
      old[#old + 1] = field
    end
  end
  -- (The order of the sums does not matter: each lands in a field of its own. Garbage there
  -- is a figure lost, reset, as in tick.lua.)
  for target, sum in pairs(sums) do if type(redis.pcall('HINCRBYFLOAT', flow, target, sum)) == 'table' then redis.call('HSET', flow, target, sum) end end
  for i = 1, #old, 1000 do
    redis.call('HDEL', flow, unpack(old, i, math.min(i + 999, #old)))
  end
end
