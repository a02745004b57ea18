local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
if not r or r.tok ~= ARGV[2] then return 0 end
local was = r.st
clearResult(r)
r.st, r.rsn, r.exp = 'r', '$ReasonNotDone', now + tonumber(ARGV[3])
save(r)
settle(was, 'r', r.exp)
notice(cur)
return 1
