
local cur = redis.call('HMGET', KEYS[1], 'st', 'lu')
local st = cur[1]
local code = $codeDone
if not st then
  code = $codeNotFound
elseif st == 'completed' or (st == 'in_flight' and tonumber(cur[2] or '0') > now) then
  code = $codeConflict
else
  redis.call('HSET', KEYS[1], 'st', 'completed', 'tok', ARGV[2], 'ca', now, 'sc', ARGV[3],
    'hd', ARGV[4], 'bd', ARGV[5], 'bo', ARGV[6], 'dg', ARGV[7], 'eid', ARGV[8], 'rsn', 'operator')
  audit(ARGV[10])
  settle(st, 'completed', tonumber(ARGV[9]))
end
