-- Run a few read-only commands in one atomic step: a consistent snapshot that, unlike
-- MULTI/EXEC, Redis still serves at maxmemory (it refuses every command queued in a MULTI then).
-- KEYS[i]   the keys read (all of one structure: one hash tag, one cluster slot)
-- ARGV      a list of commands, each: name, index of its key in KEYS, count n of extra
--           arguments, then those n arguments. Names outside READS are refused (the script
--           never writes).
-- Reply: one reply per command, in order (nil replies as false). Bounded: the callers read a
-- few fields, cardinalities and counter hashes of a few dozen fields.
-- Lost reply: safe to run twice (read-only)
local READS = {HGETALL = true, HGET = true, HMGET = true, ZCARD = true, ZSCORE = true, GET = true,
  LLEN = true, SCARD = true}
local replies, i = {}, 1
while i <= #ARGV do
  local name, key, n = ARGV[i], KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2])
  if not READS[name] then return redis.error_reply('ERR read_atomic: not a read command: ' .. name) end
  local reply = redis.call(name, key, unpack(ARGV, i + 3, i + 2 + n))
  replies[#replies + 1] = reply
  i = i + 3 + n
end
return replies
