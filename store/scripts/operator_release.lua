
local cur = redis.call('HMGET', KEYS[1], 'st', 'lu')
local st = cur[1]
local code = $codeDone
if not st then
  code = $codeNotFound
elseif st == 'in_flight' and tonumber(cur[2] or '0') > now then
  code = $codeConflict
else
  redis.call('HDEL', KEYS[1], $resultFields)
  redis.call('HSET', KEYS[1], 'st', 'released', 'tok', ARGV[2], 'rsn', 'operator')
  audit(ARGV[4])
  settle(st, 'released', tonumber(ARGV[3]))
end
