-- New entries (XREADGROUP). Returns how many were read, handed out or not.
--#include stream_fields
--#include stream_held
--#include stream_held_member
--#include stream_hand
--#include stream_bury
local function stream_take_new(s, r)
  if r.handed >= r.n or r.alone then return 0 end
  local read = redis.call('XREADGROUP', 'GROUP', r.group, r.consumer, 'COUNT', r.n - r.handed,
    'STREAMS', s.events, '>')
  local entries = read and read[1] and read[1][2] or {}
  local last_seq = tonumber(redis.call('HGET', s.gstats, 'last_seq') or '0')
  for _, entry in ipairs(entries) do
    local id, f = entry[1], stream_fields(entry[2])
    local seq, key = tonumber(f['n']), f['k']
    -- A gap in sequence numbers: the cap trimmed entries before this group read them.
    if seq and seq > last_seq + 1 then redis.call('HINCRBY', s.gstats, 'missed', seq - last_seq - 1) end
    if seq and seq > last_seq then last_seq = seq end
    redis.call('HINCRBY', s.gstats, 'delivered', 1)
    if not (seq and f['d']) then
      -- An entry no publish wrote (a corruption: no payload or sequence number): dead-lettered
      -- as it is, in the same step, never handed out.
      redis.call('XACK', s.events, r.group, id)
      f['d'] = f['d'] or ''
      stream_bury(s, r.group, id, f, 1, 'undecodable stream entry (no payload or sequence number)', r.now)
    elseif f['to'] and f['to'] ~= r.group then
      redis.call('XACK', s.events, r.group, id)  -- a requeued dead letter of another group
    elseif r.guard and redis.call('ZSCORE', s.done, id) then
      redis.call('XACK', s.events, r.group, id)  -- a replayed entry this group completed
      redis.call('HINCRBY', s.gstats, 'guard_skipped', 1)
    elseif r.ordered and key and redis.call('HEXISTS', s.busy, 'k:' .. key) == 1 then
      -- An earlier entry of its key is in flight: park it until that one is settled.
      redis.call('XCLAIM', s.events, r.group, HELD, 0, id, 'RETRYCOUNT', 0, 'JUSTID')
      redis.call('ZADD', s.held, 0, stream_held_member(key, id))
    else
      if r.ordered and key then redis.call('HSET', s.busy, 'k:' .. key, id, 'i:' .. id, key) end
      stream_hand(r, id, f, 1)
    end
  end
  redis.call('HSET', s.gstats, 'last_seq', last_seq)
  return #entries
end
