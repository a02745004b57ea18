local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
if not r then return {$codeCheckRefused, now, false} end
if r.st ~= 'u' or r.tok ~= ARGV[2] or r.clt ~= ARGV[3] then
  return {$codeCheckRefused, now, cur}
end
local code = $codeCheckHeld
local line = string.format('%d', now) .. ' ' .. ARGV[4] .. ' ' .. ARGV[5]
local log = r.chl
if log ~= '' then log = log .. '\n' .. line else log = line end
local _, n = string.gsub(log, '\n', '')
while n >= $MaxCheckEntries do
  log = string.sub(log, string.find(log, '\n', 1, true) + 1)
  n = n - 1
end
r.chl, r.chc, r.clt, r.clu = log, (tonumber(r.chc) or 0) + 1, '', ''
if ARGV[15] ~= '' then audit(r, ARGV[15]) end
local verdict = ARGV[5]
local ttl = tonumber(ARGV[9])
local streak = tonumber(r.chs) or 0
if verdict == 'not_applied' then
  local last = tonumber(r.chf) or 0
  if last == 0 or now - last >= tonumber(ARGV[7]) then
    streak = streak + 1
    r.chs, r.chf = streak, now
  end
end
if verdict == 'applied' then
  r.chn, r.req = '', ''
  r.st, r.tok, r.ca, r.sc, r.hd, r.bd = 'c', ARGV[3], now, ARGV[10], ARGV[11], ARGV[12]
  r.bo, r.dg, r.eid, r.rsn, r.exp = '0', ARGV[13], ARGV[14], '$ReasonVerified', now + ttl
  code = $codeCheckApplied
  local tomb = tonumber(ARGV[16]) or 0
  if tomb > 0 then bury(now, ARGV[10], '$ReasonVerified', r.exp + tomb) end
elseif verdict == 'not_applied' and streak >= tonumber(ARGV[6]) then
  clearResult(r)
  r.chn, r.ndu = '', '' -- found not applied: no earlier execution took effect
  r.st, r.tok, r.rsn, r.exp = 'r', ARGV[3], '$ReasonVerifiedNotApplied', now + ttl
  code = $codeCheckReleased
elseif tonumber(ARGV[8]) > 0 then
  r.chn = now + tonumber(ARGV[8])
else
  r.chn = ''
end
local s = save(r)
settle('u', r.st, r.exp)
return {code, now, s}
