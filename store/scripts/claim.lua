
local key = KEYS[1]
local tok = ARGV[2]
local lease = tonumber(ARGV[7])
local hold = tonumber(ARGV[8])
local notAfter = tonumber(ARGV[10])
-- The record, read once: a replay or a conflict answers from it.
local r = redis.call('HMGET', key, $fields)
local st = r[$iState]
-- Only a step that may hand out or move a claim needs the clock, and only
-- such a step is refused when the caller has given up (a stalled Redis
-- ran it late): a completed or held record is answered as it is.
local function late()
  return clock() > notAfter and notAfter > 0
end
if not st then
  if late() then return {$codeLate, now} end
  redis.call('HSET', key, 'st', 'in_flight', 'tok', tok, 'route', ARGV[3], 'op', ARGV[4],
    'fp', ARGV[5], 'fpr', ARGV[6], 'sa', now, 'lu', now + lease, 'att', 1, 'exe', 1)
  if ARGV[11] ~= '' then
    redis.call('HSET', key, 'chk', ARGV[11], 'cha', ARGV[12])
  end
  settle(false, 'in_flight', hold)
  return {$codeCreated, now}
end
if st == 'completed' or st == 'unknown' then
  redis.call('HINCRBY', key, 'att', 1)
  r[$iAttempts] = tostring(tonumber(r[$iAttempts] or '0') + 1)
  table.insert(r, 1, 0) -- no clock was read
  table.insert(r, 1, $codeExisting)
  return r
end
if late() then return {$codeLate, now} end
local code = $codeExisting
if st == 'in_flight' and r[$iToken] == tok then
  code = $codeOwned
else
  local expired = st == 'in_flight' and tonumber(r[$iLeaseUntil] or '0') <= now
  local same = r[$iFingerprint] == ARGV[5] and r[$iFingerprintRule] == ARGV[6]
  redis.call('HINCRBY', key, 'att', 1)
  if expired and ARGV[9] ~= 'release' then
    redis.call('HSET', key, 'st', 'unknown', 'rsn', 'lease_expired')
    if r[$iCheckAfter] then
      redis.call('HSET', key, 'chn', now + tonumber(r[$iCheckAfter]))
    end
    settle(st, 'unknown', hold)
  elseif same and (expired or st == 'released') then
    redis.call('HDEL', key, $resultFields, $checkState)
    redis.call('HSET', key, 'st', 'in_flight', 'tok', tok, 'route', ARGV[3], 'sa', now, 'lu', now + lease)
    if ARGV[11] ~= '' then
      redis.call('HSET', key, 'chk', ARGV[11], 'cha', ARGV[12])
    else
      redis.call('HDEL', key, 'chk', 'cha')
    end
    redis.call('HINCRBY', key, 'exe', 1)
    settle(st, 'in_flight', hold)
    code = $codeTakeOver
  elseif code == $codeExisting then
    -- A live claim or a record of another payload: nothing but the
    -- attempt changed.
    r[$iAttempts] = tostring(tonumber(r[$iAttempts] or '0') + 1)
    table.insert(r, 1, now)
    table.insert(r, 1, code)
    return r
  end
end
