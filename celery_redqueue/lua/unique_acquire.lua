-- Take the lock of one key for a task, or say which task holds it.
-- KEYS[1..5]: the lock table's keys (unique_keys.lua names each).
-- ARGV[1] lock key
-- ARGV[2] token of the new holder (unique per attempt; a queued lock's token is its task id)
-- ARGV[3] task id of the new holder
-- ARGV[4] who takes it (host and pid, for operators)
-- ARGV[5] phase: 'queued' (taken at the call site) or 'running' (taken by the worker)
-- ARGV[6] lease time to live, ms
-- ARGV[7] claim: 1 when a running task may take over the queued lock its own call took
-- Reply: {ACQUIRED (1), fence, expiry_ms} or {REFUSED (0), task id of the holder, expiry_ms}.
-- Bounded: O(log N) (and up to 10 expired locks forgotten).
-- Lost reply: safe to run twice: an acquire whose token holds the lock replies the same
-- lease; a refusal is recorded under its token and replied again without counting twice.
--#include unique_keys
--#include unique_check
--#include unique_entry
--#include lease_now
--#include record_call
--#include recorded
--#include unique_forget_expired
local ACQUIRED, REFUSED = 1, 0
local locks = unique_keys(KEYS)
unique_check(locks)
local key, token, task, who, phase = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local ttl_ms, claim = tonumber(ARGV[6]), ARGV[7] == '1'
if not ttl_ms or ttl_ms <= 0 or (phase ~= 'queued' and phase ~= 'running') then
  return redis.error_reply('ERR unique_acquire: bad ttl or phase')
end
local now = lease_now()
local raw = redis.call('HGET', locks.held, key)
local entry = raw and unique_entry(locks, key, raw)
local expiry = tonumber(redis.call('ZSCORE', locks.expiry, key) or '0')
if entry and entry.token == token and expiry > now then
  -- A re-send whose first reply was lost: the same lease again.
  return {ACQUIRED, entry.fence, expiry}
end
local refusal = recorded(locks.calls, 'acquire:' .. token)
if refusal then
  return {REFUSED, refusal, expiry}
end
local last_fence, since = 0, now
if entry and expiry > now then
  local takeover = claim and entry.task == task and entry.phase == 'queued'
  if not takeover then
    record_call(locks.calls, locks.calls_at, 'acquire:' .. token, entry.task, now)
    redis.call('HINCRBY', locks.stats, 'refused', 1)
    return {REFUSED, entry.task, expiry}
  end
  last_fence, since = tonumber(entry.fence) or 0, entry.since
elseif entry then
  -- Its holder died (or stalled) past its lease: the key is free.
  redis.call('ZREM', locks.expiry, key)
  redis.call('HINCRBY', locks.stats, 'expired', 1)
  last_fence = tonumber(entry.fence) or 0
end
unique_forget_expired(locks, 10, now)
-- Fencing token: above the last one of this key, and at least the server time in us, so it
-- grows even after the entry (and its fence) was deleted.
local t = redis.call('TIME')
local fence = string.format('%d', math.max(last_fence + 1, tonumber(t[1]) * 1000000 + tonumber(t[2])))
expiry = now + ttl_ms
redis.call('HSET', locks.held, key, cjson.encode({
  token = token, task = task, who = who, phase = phase, since = since, fence = fence,
}))
redis.call('ZADD', locks.expiry, expiry, key)
redis.call('HINCRBY', locks.stats, 'acquired', 1)
return {ACQUIRED, fence, expiry}
