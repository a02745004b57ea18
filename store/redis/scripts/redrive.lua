local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
if not r then return {$codeNotFound, now, false} end
-- allowed where the operation is known not done (store.KnownNotDone):
-- released by an operator or by verification, or released or held as
-- retries exhausted after "not done" answers only (and no check holds
-- it), with a kept request (RedriveRefusal says why not)
local clean = (tonumber(r.ndu) or 0) == 0
local ok = r.req ~= '' and (
  (r.st == 'r' and (r.rsn == '$ReasonOperator' or r.rsn == '$ReasonVerifiedNotApplied' or (r.rsn == '$ReasonNotDone' and clean)))
  or (r.st == 'u' and r.rsn == '$ReasonRetriesExhausted' and clean and (tonumber(r.clu) or 0) <= now))
if not ok then return {$codeConflict, now, cur} end
local was = r.st
clearResult(r)
for _, f in ipairs({'chc', 'chn', 'chs', 'chf', 'clt', 'clu'}) do r[f] = '' end
r.st, r.tok, r.sa, r.lu = 'f', ARGV[2], now, now + tonumber(ARGV[3])
r.exe, r.exp = r.exe + 1, now + tonumber(ARGV[4])
audit(r, ARGV[5])
local s = save(r)
settle(was, 'f', r.exp)
return {$codeDone, now, s}
