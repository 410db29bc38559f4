-- Hand up to n entries to one consumer of a group: first held entries whose key came free
-- (ordered groups), then entries pending longer than the visibility timeout (XAUTOCLAIM; past
-- max deliveries they are dead-lettered instead), then new entries (XREADGROUP).
-- KEYS[1..12]: see stream_common.lua (stream, then the group's keys).
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] n, ARGV[4] visibility timeout ms,
-- ARGV[5] max deliveries, ARGV[6] processed-guard (1|0), ARGV[7] ordered (1|0),
-- ARGV[8] drain lease ms, ARGV[9] linger (1|0): on nothing to hand out keep the lease.
-- Returns {status, then per entry: id, payload, deliveries, key ('' none)}.
-- status 1: entries (the lease renewed); 0: nothing to hand out, lease released in the same
-- step so nothing published afterwards is stranded; 2: nothing, lease kept (linger);
-- 3: nothing handed out yet, but every pass skipped entries (guard, other groups' letters,
-- held keys) and more wait: read again at once (lease renewed).
-- Bounded: O(n) entries looked at per pass, at most 10 passes.
--#include stream_common
local group, consumer, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local visibility, max_deliveries = tonumber(ARGV[4]), tonumber(ARGV[5])
local guard, ordered = ARGV[6] == '1', ARGV[7] == '1'
local lease_ms, linger = tonumber(ARGV[8]), ARGV[9] == '1'
if not n or n < 1 or not visibility or not max_deliveries or not lease_ms then
  return redis.error_reply('ERR stream_read: malformed arguments')
end
local now = now_ms()
ensure_group(group, K_GSTATS, now)
if guard then forget_expired(K_DONE, now) end

local out = {1}
local handed = 0
local function hand(id, f, deliveries)
  out[#out + 1] = id
  out[#out + 1] = f['d']
  out[#out + 1] = deliveries
  out[#out + 1] = f['k'] or ''
  handed = handed + 1
end

-- A pending entry is no longer to be handed out: acknowledge it and free its key.
local function drop(id)
  redis.call('XACK', K_EVENTS, group, id)
  if ordered then release_key(id) end
end

-- A pending entry, handed out (again): checks, then the consumer owns it with its count.
local function redeliver(id, f, counted)
  if not f then
    drop(id)  -- the cap trimmed it before it was acknowledged: nothing left to deliver
    redis.call('HINCRBY', K_GSTATS, 'lost', 1)
    return
  end
  if guard and redis.call('ZSCORE', K_DONE, id) then
    drop(id)
    redis.call('HINCRBY', K_GSTATS, 'guard_skipped', 1)
    return
  end
  local deliveries = counted + 1
  if deliveries > max_deliveries then
    bury(group, id, f, counted,
      'not acknowledged after ' .. counted .. ' deliveries (visibility timeout ' .. visibility .. ' ms)', now)
    drop(id)
    return
  end
  redis.call('XCLAIM', K_EVENTS, group, consumer, 0, id, 'RETRYCOUNT', deliveries, 'JUSTID')
  if counted > 0 then redis.call('HINCRBY', K_GSTATS, 'redelivered', 1) end
  hand(id, f, deliveries)
end

local more = false
for _ = 1, 10 do
  -- Held entries whose key came free: they were parked with 0 deliveries.
  while ordered and handed < n do
    local id = redis.call('LPOP', K_READY)
    if not id then break end
    local counted = deliveries_of(group, id)
    redeliver(id, entry_of(id), counted)
  end
  -- Entries whose consumer did not acknowledge them in time.
  local more_claims = false
  if handed < n then
    local cursor = redis.call('HGET', K_GSTATS, 'cursor') or '0-0'
    local claimed = redis.call('XAUTOCLAIM', K_EVENTS, group, consumer, visibility, cursor,
      'COUNT', n - handed, 'JUSTID')
    redis.call('HSET', K_GSTATS, 'cursor', claimed[1])
    more_claims = #claimed[2] > 0 and claimed[1] ~= '0-0'
    for _, id in ipairs(claimed[2]) do
      local f = entry_of(id)
      local counted = deliveries_of(group, id)
      if ordered and f and f['k'] and redis.call('ZSCORE', K_HELD, held_member(f['k'], id)) then
        -- Still waiting for its key: back to the held consumer, count untouched.
        redis.call('XCLAIM', K_EVENTS, group, HELD, 0, id, 'JUSTID')
      else
        redeliver(id, f, counted)
      end
    end
  end
  -- New entries.
  local fresh = 0
  if handed < n then
    local read = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n - handed,
      'STREAMS', K_EVENTS, '>')
    local entries = read and read[1] and read[1][2] or {}
    fresh = #entries
    local last_seq = tonumber(redis.call('HGET', K_GSTATS, 'last_seq') or '0')
    for _, entry in ipairs(entries) do
      local id, f = entry[1], fields_of(entry[2])
      local seq = tonumber(f['n'])
      -- A gap in sequence numbers: the cap trimmed entries before this group read them.
      if seq > last_seq + 1 then redis.call('HINCRBY', K_GSTATS, 'missed', seq - last_seq - 1) end
      if seq > last_seq then last_seq = seq end
      redis.call('HINCRBY', K_GSTATS, 'delivered', 1)
      local key = f['k']
      if f['to'] and f['to'] ~= group then
        redis.call('XACK', K_EVENTS, group, id)  -- a requeued dead letter of another group
      elseif guard and redis.call('ZSCORE', K_DONE, id) then
        redis.call('XACK', K_EVENTS, group, id)  -- a replayed entry this group completed
        redis.call('HINCRBY', K_GSTATS, 'guard_skipped', 1)
      elseif ordered and key and redis.call('HEXISTS', K_BUSY, 'k:' .. key) == 1 then
        redis.call('XCLAIM', K_EVENTS, group, HELD, 0, id, 'RETRYCOUNT', 0, 'JUSTID')
        redis.call('ZADD', K_HELD, 0, held_member(key, id))
      else
        if ordered and key then redis.call('HSET', K_BUSY, 'k:' .. key, id, 'i:' .. id, key) end
        hand(id, f, 1)
      end
    end
    redis.call('HSET', K_GSTATS, 'last_seq', last_seq)
  end
  -- Stop when something was handed out, or when nothing more could be.
  more = fresh > 0 or more_claims or redis.call('LLEN', K_READY) > 0
  if handed > 0 or not more then break end
end

if handed == 0 then
  if more then
    redis.call('SET', K_DRAIN, 1, 'PX', lease_ms)
    return {3}
  end
  if linger then return {2} end
  redis.call('DEL', K_DRAIN)
  return {0}
end
redis.call('SET', K_DRAIN, 1, 'PX', lease_ms)
return out
