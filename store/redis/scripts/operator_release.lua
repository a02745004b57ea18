local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
local code, s = $codeDone, false
if not r then
  code = $codeNotFound
elseif r.st == 'f' and r.lu > now then
  code, s = $codeConflict, cur
elseif r.st == 'u' and (tonumber(r.clu) or 0) > now then
  -- a verification check holds the record: its verdict must land
  code, s = $codeConflict, cur
else
  local was = r.st
  clearResult(r)
  r.st, r.tok, r.rsn, r.exp = 'r', ARGV[2], '$ReasonOperator', now + tonumber(ARGV[3])
  r.ndc, r.ndu = '', '' -- an operator's release gives the operation a fresh retry budget
  audit(r, ARGV[4])
  redis.call('DEL', KEYS[5]) -- known not to have taken effect: no tombstone
  s = save(r)
  settle(was, 'r', r.exp)
end
return {code, now, s}
