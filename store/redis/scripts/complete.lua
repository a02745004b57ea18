local key, blob = KEYS[1], ARGV[3]
-- done leaves what the completion asks for beside the record, in this
-- same step: its tombstone (ARGV[5]: ms past the record, 0: none; ARGV[6]
-- the value) and its twin entry (KEYS[6], on a single node: ARGV[7] the
-- value, ARGV[8] its lifetime ms).
local function done(old)
  local tomb = tonumber(ARGV[5]) or 0
  if tomb > 0 then
    redis.call('SET', KEYS[5], ARGV[6], 'PX', tonumber(ARGV[4]) + tomb)
  end
  if KEYS[6] then
    redis.call('SET', KEYS[6], ARGV[7], 'PX', ARGV[8])
  end
  notice(old)
  return 1
end
-- The result is written first, in one SET with its lifetime, and checked
-- after: the record the claim made, unchanged but for the state, is the
-- usual case and costs no parsing.
local old = redis.call('SET', key, blob, 'GET', 'PX', ARGV[4])
if not old then
  -- Gone (a failover lost the claim, or it expired): written anew.
  return done(nil)
end
-- Attempts and executions (3..22), times, claim length and claim part
-- (36..): all but the state and the expiry.
local n = tonumber(string.sub(old, 62, 71))
if string.sub(old, 2, 2) == 'f' and string.sub(old, 3, 22) == string.sub(blob, 3, 22)
    and string.sub(old, 36, 71 + n) == string.sub(blob, 36, 71 + n) then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return done(old)
end
local r = decode(old)
if r.tok ~= ARGV[2] then
  -- Not this claim's record any more: put it back as it was.
  redis.call('SET', key, old, 'PXAT', string.format('%d', r.exp))
  return 0
end
-- This claim's record, changed since the claim (attempts, renewal, a
-- hold, checks, a takeover's history): keep all that, add the result.
local res = decode(blob)
for _, f in ipairs(resultFields) do r[f] = res[f] end
r.req = '' -- a completed record keeps no request
local was = r.st
r.st, r.exp = 'c', res.exp
redis.call('SET', key, encode(r), 'KEEPTTL') -- the lifetime the first SET gave it
if idx[was] then redis.call('ZREM', idx[was], ARGV[1]) end
return done(old)
