-- The server clock in whole ms (lease expiries feed PX-like integer arithmetic).
--#include clock
local function lease_now()
  return math.floor(now_ms())
end
