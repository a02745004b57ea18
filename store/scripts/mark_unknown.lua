
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok', 'cha')
if cur[2] ~= ARGV[2] or cur[1] == 'completed' then return 0 end
redis.call('HSET', KEYS[1], 'st', 'unknown', 'rsn', ARGV[3])
if cur[3] then
  redis.call('HSET', KEYS[1], 'chn', now + tonumber(cur[3]))
end
settle(cur[1], 'unknown', tonumber(ARGV[4]))
return 1
