-- Add entry `id` (fields `f`) to the read's reply r.out, handed out the `receives`-th time.
local function stream_hand(r, id, f, receives)
  r.out[#r.out + 1] = id
  r.out[#r.out + 1] = f['d']
  r.out[#r.out + 1] = receives
  r.out[#r.out + 1] = f['k'] or ''
  r.handed = r.handed + 1
end
