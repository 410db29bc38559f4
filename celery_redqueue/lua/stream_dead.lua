-- Requeue or purge dead letters of a stream (the list shared by its groups).
-- KEYS[1..5]: see stream_keys.lua (the stream's keys only).
-- ARGV[1] maxlen (0: uncapped), ARGV[2] action: requeue | purge,
-- ARGV[3] how many from the oldest when no entries are named (-1: all, in chunks of 1000),
-- ARGV[4], ... exact dead-letter entries to act on (as listed); none: the oldest ARGV[3].
-- A requeued letter is appended to the stream again as a new entry addressed to its group
-- only (field "to"; other groups skip it), with its partition key, under the cap.
-- A letter that cannot be parsed (no metadata, or no group) stays listed when requeued and is
-- deleted when purged. Every letter is read and checked before any is removed.
-- Reply: {letters acted on, trimmed by the cap, groups requeued to (names)}.
-- Lost reply: safe to run twice (the package names the exact letters: a second run finds them
-- gone)
--#include stream_keys
--#include stream_check
--#include stream_append
local s = stream_keys(KEYS)
stream_check(s)
local maxlen, action, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if not maxlen or not limit or (action ~= 'requeue' and action ~= 'purge') then
  return redis.error_reply('ERR stream_dead: malformed arguments')
end
local candidates = {}
if #ARGV >= 4 then
  for i = 4, #ARGV do candidates[#candidates + 1] = ARGV[i] end
else
  if limit < 0 or limit > 1000 then limit = 1000 end
  candidates = redis.call('LRANGE', s.dead, 0, limit - 1)
end
local usable = {}
for _, entry in ipairs(candidates) do
  local newline = string.find(entry, '\n', 1, true)
  local ok, info = false, nil
  if newline then ok, info = pcall(cjson.decode, string.sub(entry, 1, newline - 1)) end
  if ok and type(info) == 'table' and type(info['key']) == 'string' and info['key'] ~= '' then
    local pkey = info['pkey']
    if type(pkey) ~= 'string' then pkey = '' end
    usable[#usable + 1] = {entry = entry, group = info['key'], pkey = pkey,
                           payload = string.sub(entry, newline + 1)}
  elseif action == 'purge' then
    usable[#usable + 1] = {entry = entry}
  end
end
local acted, trimmed, groups, seen = 0, 0, {}, {}
for _, u in ipairs(usable) do
  if redis.call('LREM', s.dead, 1, u.entry) == 1 then
    acted = acted + 1
    if action == 'requeue' then
      local _, out = stream_append(s, maxlen, u.payload, u.pkey, u.group)
      trimmed = trimmed + out
      redis.call('HINCRBY', s.stats, 'requeued', 1)
      if not seen[u.group] then seen[u.group] = true; groups[#groups + 1] = u.group end
    else
      redis.call('HINCRBY', s.stats, 'purged', 1)
    end
  end
end
return {acted, trimmed, groups}
