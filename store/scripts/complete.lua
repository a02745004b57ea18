
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if not cur[1] then
  redis.call('HSET', KEYS[1], 'tok', ARGV[2], 'route', ARGV[10], 'op', ARGV[11],
    'fp', ARGV[12], 'fpr', ARGV[13], 'sa', ARGV[14], 'lu', ARGV[14], 'att', 1, 'exe', 1)
elseif cur[2] ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'st', 'completed', 'ca', now, 'sc', ARGV[3], 'hd', ARGV[4],
  'bd', ARGV[5], 'bo', ARGV[6], 'dg', ARGV[7], 'eid', ARGV[8], 'rsn', '')
settle(cur[1], 'completed', tonumber(ARGV[9]))
return 1
