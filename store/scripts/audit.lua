
local function audit(entry)
  local line = '{"at":' .. string.format('%d', now) .. ',' .. entry
  local a = redis.call('HGET', KEYS[1], 'aud')
  if a then a = a .. '\n' .. line else a = line end
  local _, n = string.gsub(a, '\n', '')
  while n >= $MaxAuditEntries do
    a = string.sub(a, string.find(a, '\n', 1, true) + 1)
    n = n - 1
  end
  redis.call('HSET', KEYS[1], 'aud', a)
end
