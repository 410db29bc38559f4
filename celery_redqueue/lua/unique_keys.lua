-- A unique-lock table's keys by name (spliced in at "--#include unique_keys"); `keys` is a
-- script's KEYS. Every unique script receives the same KEYS (see unique.PARTS in unique.py):
-- KEYS[1] held      hash: lock key -> its holder, a JSON object {token, task, who, phase,
--                   since (ms), fence}
-- KEYS[2] expiry    zset: lock key -> when its lease runs out (ms, server clock)
-- KEYS[3] stats     hash: counters (acquired, refused, released, renewed, expired, lost,
--                   handed_back)
-- KEYS[4] calls     hash: call id -> what it did (record_call.lua: re-sent acquires, releases)
-- KEYS[5] calls_at  zset: call id -> when its record expires (ms)
local function unique_keys(keys)
  return {held = keys[1], expiry = keys[2], stats = keys[3], calls = keys[4], calls_at = keys[5]}
end
