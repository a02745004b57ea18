
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_flight' or cur[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'lu', now + tonumber(ARGV[3]))
return 1
