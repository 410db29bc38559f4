-- Append events to the stream under its cap, create the groups the caller knows of (at the end,
-- before these events, so they receive them) and arm the drain lease of each group that has
-- none, unless a consumer of the group waits on its wake signal: then wake it instead
-- (wake_listener.lua). KEYS[1..5]: see
-- stream_keys.lua; then per known group: gstats, drain, listening, signal.
-- ARGV[1] maxlen (0: uncapped), ARGV[2] drain lease ms, ARGV[3] number of known groups G,
-- ARGV[4 .. 3+G] their names, then per event: payload, partition key ('' none), target group
-- ('' every group; a requeued dead letter names its group).
-- Reply: {ids, trimmed, armed group names}.
-- Lost reply: raises (a store: a second run would append the events twice)
--#include stream_keys
--#include stream_ensure_group
--#include stream_append
--#include tick
--#include wake_listener
--#include clock
local s = stream_keys(KEYS)
local maxlen, drain_lease_ms, n_groups = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local first_event = 4 + n_groups
if not maxlen or not drain_lease_ms or not n_groups or (#ARGV - first_event + 1) % 3 ~= 0 then
  return redis.error_reply('ERR stream_publish: malformed arguments')
end
local now = now_ms()

for i = 1, n_groups do stream_ensure_group(s, ARGV[3 + i], KEYS[2 + 4 * i], now) end

local ids, trimmed = {}, 0
for i = first_event, #ARGV, 3 do
  local id, out = stream_append(s, maxlen, ARGV[i], ARGV[i + 1], ARGV[i + 2])
  ids[#ids + 1] = id
  trimmed = trimmed + out
end
local events = #ids
redis.call('HINCRBY', s.stats, 'published', events)
tick(s.flow, 'in', events, now)

local armed = {}
for i = 1, n_groups do
  if not wake_listener(KEYS[4 + 4 * i], KEYS[5 + 4 * i], drain_lease_ms, now)
      and redis.call('SET', KEYS[3 + 4 * i], 1, 'NX', 'PX', drain_lease_ms) then
    armed[#armed + 1] = ARGV[3 + i]
  end
end
return {ids, trimmed, armed}
