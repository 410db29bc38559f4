-- Hand up to n entries to one consumer of a group: an entry pending longer than the visibility
-- timeout (XAUTOCLAIM; past max_receives it is dead-lettered instead) alone, a read of one (it
-- was handed out before and its batch died or failed); else held entries whose key came free
-- (ordered groups), then new entries (XREADGROUP).
-- KEYS[1..12]: see stream_keys.lua (stream, then the group's keys).
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] n, ARGV[4] visibility timeout ms,
-- ARGV[5] max_receives, ARGV[6] processed-guard (1|0), ARGV[7] ordered (1|0),
-- ARGV[8] drain lease ms, ARGV[9] linger (1|0): on nothing to hand out keep the flag,
-- ARGV[10] listen ms, ARGV[11] listener id: on nothing to hand out list the listener on the
-- group's wake signal for that long, or (0) take it off (wake_listener.lua).
-- Reply: {status, then per entry: id, payload, receives, key ('' none)}; status
-- (take_status.lua): TAKEN (the flag renewed); EMPTY: flag released in the same step, so
-- nothing published afterwards is stranded; LINGER: nothing, flag kept; AGAIN: nothing handed
-- out yet, but every pass skipped entries (guard, other groups' letters, held keys) and more
-- wait: read again at once (flag renewed).
-- Bounded: O(n) entries looked at per pass, at most 10 passes.
-- Lost reply: safe to run twice (a second run hands out other entries; those the lost reply
-- carried stay pending for this consumer and are claimed again after the visibility timeout, one
-- more delivery)
--#include stream_keys
--#include stream_check
--#include stream_ensure_group
--#include stream_take_claimed
--#include stream_take_ready
--#include stream_take_new
--#include forget_expired
--#include listen_for
--#include take_status
--#include clock
local s = stream_keys(KEYS, true)
stream_check(s)
local r = {
  group = ARGV[1], consumer = ARGV[2], n = tonumber(ARGV[3]),
  visibility = tonumber(ARGV[4]), max_receives = tonumber(ARGV[5]),
  guard = ARGV[6] == '1', ordered = ARGV[7] == '1',
  out = {TAKEN}, handed = 0,
}
local drain_lease_ms, linger, listen = tonumber(ARGV[8]), ARGV[9] == '1', tonumber(ARGV[10]) or 0
local listener = ARGV[11] or ''
if not r.n or r.n < 1 or not r.visibility or not r.max_receives or not drain_lease_ms then
  return redis.error_reply('ERR stream_read: malformed arguments')
end
r.now = now_ms()
stream_ensure_group(s, r.group, s.gstats, r.now)
if r.guard then forget_expired(s.done, r.now) end

local more = false
for _ = 1, 10 do
  local more_claims = stream_take_claimed(s, r)  -- first: a read that holds entries claims none
  stream_take_ready(s, r)
  local fresh = stream_take_new(s, r)
  -- Stop when something was handed out, or when nothing more could be.
  more = fresh > 0 or more_claims or redis.call('LLEN', s.ready) > 0
  if r.handed > 0 or not more then break end
end

if r.handed == 0 and not more then
  listen_for(s.listening, s.signal, listener, listen, r.now)
  if linger then return {LINGER} end
  redis.call('DEL', s.drains)
  return {EMPTY}
end
redis.call('SET', s.drains, 1, 'PX', drain_lease_ms)
if r.handed == 0 then return {AGAIN} end
return r.out
