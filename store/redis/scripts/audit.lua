-- audit appends an operator action to the record's trail, keeping the
-- last $MaxAuditEntries.
local function audit(r, entry)
  local line = '{"at":' .. string.format('%d', now) .. ',' .. entry
  local a = r.aud
  if a ~= '' then a = a .. '\n' .. line else a = line end
  local _, n = string.gsub(a, '\n', '')
  while n >= $MaxAuditEntries do
    a = string.sub(a, string.find(a, '\n', 1, true) + 1)
    n = n - 1
  end
  r.aud = a
end
