
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'st', 'tok', 'clt', 'clu', 'chn')
local code = 0
if cur[1] == 'unknown' and cur[2] == ARGV[2] then
  local leased = cur[4] and tonumber(cur[4]) > now
  if leased and cur[3] == ARGV[3] then
    code = 1
  elseif not leased and (ARGV[5] ~= '1' or (cur[5] and tonumber(cur[5]) <= now)) then
    redis.call('HSET', key, 'clt', ARGV[3], 'clu', now + tonumber(ARGV[4]))
    code = 1
  end
end
