
local notAfter = tonumber(ARGV[10])
if notAfter > 0 and now > notAfter then
  return {$codeLate, now}
end
local key = KEYS[1]
local tok = ARGV[2]
local lease = tonumber(ARGV[7])
local hold = tonumber(ARGV[8])
local cur = redis.call('HMGET', key, 'st', 'tok', 'lu', 'fp', 'fpr', 'cha')
local st = cur[1]
local code = $codeExisting
if not st then
  redis.call('HSET', key, 'st', 'in_flight', 'tok', tok, 'route', ARGV[3], 'op', ARGV[4],
    'fp', ARGV[5], 'fpr', ARGV[6], 'sa', now, 'lu', now + lease, 'att', 1, 'exe', 1)
  if ARGV[11] ~= '' then
    redis.call('HSET', key, 'chk', ARGV[11], 'cha', ARGV[12])
  end
  settle(false, 'in_flight', hold)
  return {$codeCreated, now}
elseif st == 'in_flight' and cur[2] == tok then
  code = $codeOwned
else
  local expired = st == 'in_flight' and tonumber(cur[3] or '0') <= now
  local same = cur[4] == ARGV[5] and cur[5] == ARGV[6]
  redis.call('HINCRBY', key, 'att', 1)
  if expired and ARGV[9] ~= 'release' then
    redis.call('HSET', key, 'st', 'unknown', 'rsn', 'lease_expired')
    if cur[6] then
      redis.call('HSET', key, 'chn', now + tonumber(cur[6]))
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
  end
end
