local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
if not r then return {0, now, false} end
local code = 0
if r.st == 'u' and r.tok == ARGV[2] then
  local leased = (tonumber(r.clu) or 0) > now
  if leased and r.clt == ARGV[3] then
    code = 1
  elseif not leased and (ARGV[5] ~= '1' or (r.chn ~= '' and tonumber(r.chn) <= now)) then
    r.clt, r.clu = ARGV[3], now + tonumber(ARGV[4])
    return {1, now, save(r)}
  end
end
return {code, now, cur}
