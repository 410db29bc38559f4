-- What became of a call offered to a pool (spliced in at "--#include pool_status"): the status
-- pool_admit returns and pool_add replies per call; pool.py names the same
-- values (a test checks they agree). Refused (full, or the policy kept the others); kept; kept,
-- and an older entry evicted to make room; merged into an equal entry (coalescing); refused as
-- a duplicate (its dedupe id was seen within the window); held until due (delayed).
local REFUSED, KEPT, EVICTED, MERGED, DUPLICATE, DELAYED = 0, 1, 2, 3, 4, 5
