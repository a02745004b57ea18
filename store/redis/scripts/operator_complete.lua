local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
local code, s = $codeDone, false
if not r then
  code = $codeNotFound
elseif r.st == 'c' or (r.st == 'f' and r.lu > now) then
  code, s = $codeConflict, cur
elseif r.st == 'u' and (tonumber(r.clu) or 0) > now then
  -- a verification check holds the record: its verdict must land
  code, s = $codeConflict, cur
else
  local was = r.st
  r.st, r.tok, r.ca, r.sc, r.hd, r.bd = 'c', ARGV[2], now, ARGV[3], ARGV[4], ARGV[5]
  r.bo, r.dg, r.eid, r.rsn, r.exp = ARGV[6], ARGV[7], ARGV[8], '$ReasonOperator', now + tonumber(ARGV[9])
  r.req = '' -- a completed record keeps no request
  audit(r, ARGV[10])
  bury(now, ARGV[3], '$ReasonOperator', r.exp + tonumber(ARGV[11]))
  s = save(r)
  settle(was, 'c', r.exp)
end
return {code, now, s}
