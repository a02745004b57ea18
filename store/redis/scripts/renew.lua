local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
if not r or r.st ~= 'f' or r.tok ~= ARGV[2] then return 0 end
r.lu = now + tonumber(ARGV[3])
save(r)
return 1
