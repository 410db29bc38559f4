-- The record of an in-flight batch and the entries a pop replies (spliced in at
-- "--#include pool_batch" by pool_pop, pool_ack and pool_reap, after pool_common).
-- A batch is kept under its id in `inflight_items` in both delivery modes (a re-sent pop
-- replies it; at least once the reaper and failed acks return its entries) as cmsgpack of the
-- number of fields per entry, then one flat list: 5 fields (member, score, count, receives,
-- offered_at), or 2 (member, score) or 1 (member; its score is its id, as in FIFO policies):
-- fresh entries, one call each, received once, offered when their id says (the common pop
-- keeps the ZRANGE reply as it is; a sample pool delivering at most once never puts an entry
-- back, so it needs no score). msgpack, not JSON: packing copies each member as it is, where
-- JSON escapes every quote of a payload.

-- The entries of a packed batch record, each {member, score, count, receives, offered_at, id};
-- nil when the record cannot be read (corruption): the caller dead-letters it whole. `calls`
-- (optional): the calls the batch holds; a record whose entries stand for other than that
-- (a nil member cuts msgpack's list short) cannot be read either, or its missing calls vanish.
local function unpack_batch(packed, calls)
  local ok, fields, flat = pcall(cmsgpack.unpack, packed)
  if not ok or (fields ~= 1 and fields ~= 2 and fields ~= 5) or type(flat) ~= 'table'
      or #flat % fields ~= 0 then
    return nil
  end
  local entries = {}
  for i = 1, #flat, fields do
    local member = flat[i]
    local id, n
    if type(member) == 'string' then id, n = id_of(member) end
    local score, count, receives, offered_at = n, 1, 1, 0
    if fields > 1 then score = tonumber(flat[i + 1]) end  -- not the id when it is garbage
    if fields == 5 then
      count, receives, offered_at = tonumber(flat[i + 2]), tonumber(flat[i + 3]), tonumber(flat[i + 4]) or 0
    elseif n then
      offered_at = arrival_of(n)
    end
    if not (id and score and count and receives) then return nil end
    entries[#entries + 1] = {member, score, count, receives, offered_at, id}
    if calls then calls = calls - count end
  end
  if calls and calls ~= 0 then return nil end
  return entries
end

-- A pop's reply after its six status fields: the number k of entries, their k members, then
-- for each entry whose count or receives is not 1: its position (1..k), count, receives.
-- `members`, `counts`, `receives`: one value per entry, in reply order (counts nil: all 1).
local function reply_entries(result, members, counts, receives)
  local k = #members
  result[#result + 1] = k
  local at = #result
  for i = 1, k do result[at + i] = members[i] end
  if not counts then return result end
  for i = 1, k do
    if counts[i] ~= 1 or receives[i] ~= 1 then
      result[#result + 1] = i
      result[#result + 1] = counts[i]
      result[#result + 1] = receives[i]
    end
  end
  return result
end
