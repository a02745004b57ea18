-- The stored record (see blob.go): a fixed header, then the claim part and
-- the result part as netstrings. decode turns one into a table (w the
-- format byte, which marks a record a duplicate found in flight, st,
-- att, exe, exp, sa, lu and every field by name; absent fields are ''),
-- encode back.
local claimFields = {$claimFields}
local resultFields = {$resultFields}
local function decode(s)
  if not s then return nil end
  local r = {w = string.sub(s, 1, 1), st = string.sub(s, 2, 2), att = tonumber(string.sub(s, 3, 12)),
    exe = tonumber(string.sub(s, 13, 22)), exp = tonumber(string.sub(s, 23, 35)),
    sa = tonumber(string.sub(s, 36, 48)), lu = tonumber(string.sub(s, 49, 61))}
  local pos = 72
  local claimEnd = 72 + tonumber(string.sub(s, 62, 71))
  local function read(names, stop)
    for _, f in ipairs(names) do
      local c = string.find(s, ':', pos, true)
      if not c or (stop and pos >= stop) then
        r[f] = ''
      else
        local n = tonumber(string.sub(s, pos, c - 1))
        r[f] = string.sub(s, c + 1, c + n)
        pos = c + n + 1
      end
    end
  end
  -- a record written before the recovery fields has fewer claim fields
  read(claimFields, claimEnd)
  pos = claimEnd
  read(resultFields)
  return r
end
local function encode(r)
  local t = {}
  for i, f in ipairs(claimFields) do
    local v = tostring(r[f] or '')
    t[i] = #v .. ':' .. v
  end
  local claim = table.concat(t)
  t = {r.w or '1', r.st, string.format('%010d', r.att), string.format('%010d', r.exe),
    string.format('%013d', r.exp), string.format('%013d', r.sa), string.format('%013d', r.lu),
    string.format('%010d', #claim), claim}
  for _, f in ipairs(resultFields) do
    local v = tostring(r[f] or '')
    t[#t + 1] = #v .. ':' .. v
  end
  return table.concat(t)
end
-- save writes r back with its lifetime (r.exp) and returns what it wrote.
local function save(r)
  local s = encode(r)
  redis.call('SET', KEYS[1], s, 'PXAT', string.format('%d', r.exp))
  return s
end
local function clearResult(r)
  for _, f in ipairs(resultFields) do r[f] = '' end
end
-- The state indexes of the record's tag: KEYS[2..4]. A completed record
-- has none. settle moves the record from the index of state old to that
-- of state new, scored with its expiry, and trims the entries of records
-- that expired (needs now).
local idx = {f = KEYS[2], u = KEYS[3], r = KEYS[4]}
local function settle(old, new, score)
  if old ~= new and idx[old] then
    redis.call('ZREM', idx[old], ARGV[1])
  end
  if idx[new] then
    redis.call('ZADD', idx[new], score, ARGV[1])
    redis.call('ZREMRANGEBYSCORE', idx[new], '-inf', now)
  end
end
