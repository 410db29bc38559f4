-- The record of an in-flight batch and the entries a pop replies (spliced in at
-- "--#include pool_batch" by pool_pop, pool_ack and pool_reap, after pool_common).
-- A batch is kept under its id in `inflight_items` in both delivery modes (a re-sent pop
-- replies it; at least once the reaper and failed acks return its entries) as cmsgpack of one
-- flat list, five fields per entry: member, score, count, receives, offered_at. msgpack, not
-- JSON: packing copies each member as it is, where JSON escapes every quote of a payload.
local BATCH_FIELDS = 5

-- The entries of a packed batch record, each {member, score, count, receives, offered_at, id};
-- nil when the record cannot be read (corruption): the caller dead-letters it whole.
local function unpack_batch(packed)
  local ok, flat = pcall(cmsgpack.unpack, packed)
  if not ok or type(flat) ~= 'table' or #flat % BATCH_FIELDS ~= 0 then return nil end
  local entries = {}
  for i = 1, #flat, BATCH_FIELDS do
    local member = flat[i]
    local id = type(member) == 'string' and id_of(member)
    local score, count, receives = tonumber(flat[i + 1]), tonumber(flat[i + 2]), tonumber(flat[i + 3])
    if not (id and score and count and receives) then return nil end
    entries[#entries + 1] = {member, score, count, receives, tonumber(flat[i + 4]) or 0, id}
  end
  return entries
end

-- A pop's reply after its six status fields: the number k of entries, their k members, then
-- for each entry whose count or receives is not 1: its position (1..k), count, receives.
-- `members`, `counts`, `receives`: one value per entry, in reply order.
local function reply_entries(result, members, counts, receives)
  local k = #members
  result[#result + 1] = k
  local at = #result
  for i = 1, k do result[at + i] = members[i] end
  for i = 1, k do
    if counts[i] ~= 1 or receives[i] ~= 1 then
      result[#result + 1] = i
      result[#result + 1] = counts[i]
      result[#result + 1] = receives[i]
    end
  end
  return result
end
