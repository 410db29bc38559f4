-- A dead letter's metadata (a table) and payload ("json NL payload"); nil when it cannot be
-- parsed (such a letter stays listed).
local function parse_letter(entry)
  local newline = string.find(entry, '\n', 1, true)
  if not newline then return nil end
  local ok, info = pcall(cjson.decode, string.sub(entry, 1, newline - 1))
  if not ok or type(info) ~= 'table' then return nil end
  return info, string.sub(entry, newline + 1)
end
