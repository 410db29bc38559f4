-- Append events to the stream under its cap, create the groups the caller knows of (at the end,
-- before these events, so they receive them) and arm the drain flag of each group that has
-- none, unless a consumer of the group waits on its wake signal: then wake it instead
-- (wake_listener.lua). KEYS[1..5]: see
-- stream_keys.lua; then per known group: gstats, drains, listening, signal.
-- ARGV[1] maxlen (0: uncapped), ARGV[2] drain lease ms, ARGV[3] number of known groups G,
-- ARGV[4 .. 3+G] their names, then per event: payload, partition key ('' none), target group
-- ('' every group; a requeued dead letter names its group).
-- Reply: {ids, trimmed, armed group names}.
-- Lost reply: raises (a store: a second run would append the events twice)
--#include stream_keys
--#include checked_call
--#include check_keys
--#include listener_live
--#include stream_ensure_group
--#include stream_append
--#include tick
--#include clock
local s = stream_keys(KEYS)
local maxlen, drain_lease_ms, n_groups = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local first_event = 4 + n_groups
if not maxlen or not drain_lease_ms or not n_groups or (#ARGV - first_event + 1) % 3 ~= 0 then
  return redis.error_reply('ERR stream_publish: malformed arguments')
end
local now = now_ms()
-- Checks before the first write (Redis does not roll back), with the reads it makes anyway
-- where it can (checked_call.lua): a key of another type, or a counter that is not an integer,
-- stops it with "CORRUPT <key> ...", nothing written (the flow hash loses a figure instead,
-- tick.lua). A group's counters are written only when it is created; its drain flag is a SET
-- NX, which leaves a key of another type. (A TYPE of every key up front, stream_check.lua, cost
-- it 42 % of its server time, these checks 19 %: bench/script_cost.py stream_publish --against
-- <rev>, 20,000 publishes.)
local counters = checked_call('HMGET', s.stats, 'seq', 'published', 'trimmed')
for i = 1, 3 do
  if counters[i] and not string.match(counters[i], '^%-?%d+$') then
    error('CORRUPT ' .. s.stats .. ' field seq, published or trimmed is not an integer', 0)
  end
end
local fresh = checked_call('XLEN', s.events) == 0
local live = {}
for i = 1, n_groups do
  if fresh or checked_call('HEXISTS', s.groups, ARGV[3 + i]) == 0 then check_keys({KEYS[2 + 4 * i], 'hash'}) end
  local ok, listened = pcall(listener_live, KEYS[4 + 4 * i], now)
  if not ok then error('CORRUPT ' .. KEYS[4 + 4 * i] .. ' holds another type than a zset', 0) end
  live[i] = listened and (checked_call('LLEN', KEYS[5 + 4 * i]) == 0 and 'wake' or 'woken')
end

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
-- A group whose consumer listens is woken (wake_listener.lua's rule: one token at most), else
-- its drain flag is armed unless held.
for i = 1, n_groups do
  if live[i] == 'wake' then
    redis.call('RPUSH', KEYS[5 + 4 * i], 1)
    redis.call('PEXPIRE', KEYS[5 + 4 * i], drain_lease_ms)
  elseif not live[i] and redis.call('SET', KEYS[3 + 4 * i], 1, 'NX', 'PX', drain_lease_ms) then
    armed[#armed + 1] = ARGV[3 + i]
  end
end
return {ids, trimmed, armed}
