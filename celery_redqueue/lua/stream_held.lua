-- The pseudo-consumer of an ordered group that owns entries parked behind an earlier entry of
-- their partition key.
local HELD = '~held'
