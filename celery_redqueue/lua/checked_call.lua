-- A command whose failure names its key (spliced in at "--#include checked_call"): a script
-- that reads a key (or writes it first of all) this way stops, if the key holds another type
-- (WRONGTYPE) or a field that is not a number, with "CORRUPT <key> ..." (redis/client.py raises
-- CorruptDataError for it), nothing written. Cheaper than a TYPE up front when the script runs
-- the command anyway: use it for a script's reads before its first write.
local function checked_call(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    -- Only a bad key is CORRUPT; any other refusal (OOM at maxmemory, ...) goes up as it is.
    if not (string.find(reply.err, 'WRONGTYPE', 1, true) or string.find(reply.err, 'not an integer', 1, true)
        or string.find(reply.err, 'not a valid float', 1, true)) then
      error(reply.err, 0)
    end
    error('CORRUPT ' .. key .. ': ' .. command .. ' failed: ' .. reply.err, 0)
  end
  return reply
end
