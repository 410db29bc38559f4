-- List a listener on a structure's wake signal, or take it off, apart from any look at the
-- structure: the continuous consumer keeps itself listed while it lives (a store then pushes
-- a token and sends no drain job) and takes itself off when it stops. Arming apart from the
-- empty check is safe here because the consumer looks after arming (its first drain) and
-- re-arms before the listing runs out; a call stored while it is not listed asks for a drain
-- job as usual. Unlike listen_for.lua, the signal is left alone: a token in it
-- may wake the consumer for a call it has not seen yet.
-- KEYS[1] listening (the zset of listeners: listener id -> until when, ms)
-- ARGV[1] listener id, ARGV[2] ms (0: take it off)
-- Reply: 1 listed, or (ms 0) how many were taken off (0|1).
-- Bounded: O(log L + expired listeners).
-- Lost reply: safe to run twice (the same member gets the same or a later deadline)
--#include clock
--#include check_keys
local who, ms = ARGV[1] or '', tonumber(ARGV[2])
if who == '' or not ms then return redis.error_reply('ERR wake_arm: no listener id or ms') end
check_keys({KEYS[1], 'zset'})
if ms <= 0 then return redis.call('ZREM', KEYS[1], who) end
local now = now_ms()
redis.call('ZADD', KEYS[1], now + ms, who)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(last[2]) - now))
return 1
