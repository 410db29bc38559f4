-- The entries of a packed batch record (spliced in at "--#include pool_unpack_batch"), each
-- {member, score, count, receives, offered_at, id, payload}. A batch is kept under its id in
-- `inflight_items` in both delivery modes (a re-sent pop replies it; at least once the reaper
-- and failed acks return its entries) as cmsgpack of the number of fields per entry, then one
-- flat list: 5 fields (member, score, count, receives, offered_at), or 2 (member, score) or 1
-- (member; its score is its id, as in FIFO policies): fresh entries, one call each, received
-- once, offered when their id says (the common pop keeps the ZRANGE reply as it is; a sample
-- pool delivering at most once never puts an entry back, so it needs no score). msgpack, not
-- JSON: packing copies each member as it is, where JSON escapes every quote of a payload.
-- Nil when the record cannot be read (corruption): the caller dead-letters it whole. `calls`
-- (optional): the calls the batch holds; a record whose entries stand for other than that (a
-- nil member cuts msgpack's list short) cannot be read either, or its missing calls vanish.
--#include pool_id
--#include pool_arrival
local function pool_unpack_batch(packed, calls, coalesce)
  local ok, fields, flat = pcall(cmsgpack.unpack, packed)
  if not (ok and (fields == 1 or fields == 2 or fields == 5) and type(flat) == 'table'
      and #flat % fields == 0) then
    return nil
  end
  local entries = {}
  for i = 1, #flat, fields do
    local member = flat[i]
    local id, n
    if type(member) == 'string' then id, n = pool_id(member, coalesce) end
    local score, count, receives, offered_at = n, 1, 1, n and pool_arrival(n) or 0
    if fields > 1 then score = tonumber(flat[i + 1]) end  -- not the id when it is garbage
    if fields == 5 then
      count, receives, offered_at = tonumber(flat[i + 2]), tonumber(flat[i + 3]), tonumber(flat[i + 4]) or 0
    end
    if not (id and score and count and receives) then return nil end
    local payload = coalesce and member or string.sub(member, #id + 2)
    entries[#entries + 1] = {member, score, count, receives, offered_at, id, payload}
    calls = calls and calls - count
  end
  if calls and calls ~= 0 then return nil end
  return entries
end
