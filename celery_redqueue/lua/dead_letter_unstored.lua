-- Dead-letter a call that never entered its structure: a by-name message whose call the worker
-- could not store as it is (arguments the body cannot take, a key function that fails). It is
-- listed like any dead letter, with its reason, and counted in the fields the caller names
-- (offered, accepted and dead for a pool; enqueued and dead for a bucket), so every identity
-- of the structure still holds.
-- KEYS[1] dead   list: dead letters, "json NL payload"
-- KEYS[2] stats  hash: the structure's counters
-- ARGV[1] payload (the call as the worker received it, serialized)
-- ARGV[2] error text
-- ARGV[3] '1': a bucket letter (it carries an empty key: it cannot be requeued, only purged)
-- ARGV[4], ... counter fields to add one to
-- Reply: the length of the dead-letter list. O(1 + fields).
-- Lost reply: raises (a store: a second run would list the letter twice)
--#include clock
--#include check_keys
local K_DEAD, K_STATS = KEYS[1], KEYS[2]
local payload, err, keyed = ARGV[1], ARGV[2], ARGV[3] == '1'
local info = {count = 1, receives = 0, error = err, at = math.floor(now_ms())}
if keyed then info.key = '' end
check_keys({K_DEAD, 'list'}, K_STATS)
local length = redis.call('RPUSH', K_DEAD, cjson.encode(info) .. '\n' .. payload)
for i = 4, #ARGV do redis.call('HINCRBY', K_STATS, ARGV[i], 1) end
return length
