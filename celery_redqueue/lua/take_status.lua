-- The statuses of a script that takes work out (spliced in at "--#include take_status"):
-- What a consuming script (pool_pop, bucket_dequeue, stream_read) found, the first field of its
-- reply: handed work out; nothing, drain flag released (so nothing arriving later is stranded);
-- nothing, flag kept (linger); only skipped entries, more wait (take again now); nothing due
-- before the wait the reply gives; nothing taken, the structure's upkeep script must run first
-- (due delayed work to offer), then take again; nothing taken, the entries to take need the
-- general script (pool_pop_mixed: returned, coalesced, guarded or malformed entries).
-- redis/lua.py names the same values for Python (a test checks they agree).
local EMPTY, TAKEN, LINGER, AGAIN, LATER, UPKEEP, MIXED = 0, 1, 2, 3, 4, 5, 6
