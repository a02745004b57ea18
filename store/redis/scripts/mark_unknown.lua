local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
if not r or r.tok ~= ARGV[2] or r.st == 'c' then return 0 end
local was = r.st
r.st, r.rsn, r.exp = 'u', ARGV[3], now + tonumber(ARGV[4])
if r.cha ~= '' then r.chn = now + tonumber(r.cha) end
save(r)
settle(was, 'u', r.exp)
notice(cur)
return 1
