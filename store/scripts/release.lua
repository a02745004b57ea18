
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[2] ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], $resultFields)
redis.call('HSET', KEYS[1], 'st', 'released')
settle(cur[1], 'released', tonumber(ARGV[3]))
return 1
