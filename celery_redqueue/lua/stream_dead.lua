-- Requeue or purge dead letters of a stream (the list shared by its groups).
-- KEYS[1..5]: see stream_common.lua (the stream's keys only).
-- ARGV[1] maxlen (0: uncapped), ARGV[2] action: requeue | purge,
-- ARGV[3] how many from the oldest when no entries are named (-1: all, in chunks of 1000),
-- ARGV[4], ... exact dead-letter entries to act on (as listed); none: the oldest ARGV[3].
-- A requeued letter is appended to the stream again as a new entry addressed to its group
-- only (field "to"; other groups skip it), with its partition key, under the cap.
-- Reply: {letters acted on, trimmed by the cap, groups requeued to (names)}.
--#include stream_common
local maxlen, action, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if not maxlen or not limit or (action ~= 'requeue' and action ~= 'purge') then
  return redis.error_reply('ERR stream_dead: malformed arguments')
end
local now = now_ms()
local entries = {}
if #ARGV >= 4 then
  for i = 4, #ARGV do
    if redis.call('LREM', K_DEAD, 1, ARGV[i]) == 1 then entries[#entries + 1] = ARGV[i] end
  end
else
  if limit < 0 or limit > 1000 then limit = 1000 end
  for _ = 1, limit do
    local entry = redis.call('LPOP', K_DEAD)
    if not entry then break end
    entries[#entries + 1] = entry
  end
end
local trimmed, groups, seen = 0, {}, {}
for _, entry in ipairs(entries) do
  local newline = string.find(entry, '\n', 1, true)
  local info = cjson.decode(string.sub(entry, 1, newline - 1))
  local group = info['key']
  if action == 'requeue' then
    local _, out = append(maxlen, string.sub(entry, newline + 1), info['pkey'] or '', group)
    trimmed = trimmed + out
    redis.call('HINCRBY', K_STATS, 'requeued', 1)
    if not seen[group] then seen[group] = true; groups[#groups + 1] = group end
  else
    redis.call('HINCRBY', K_STATS, 'purged', 1)
  end
end
return {#entries, trimmed, groups}
