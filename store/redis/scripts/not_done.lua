local cur = redis.call('GET', KEYS[1])
local r = decode(cur)
if not r or r.tok ~= ARGV[2] then return 0 end
local was = r.st
clearResult(r)
local n = (tonumber(r.ndc) or 0) + 1
local line = string.format('%d', now) .. ' ' .. ARGV[3]
local a = r.ans
if a ~= '' then a = a .. '\n' .. line else a = line end
local _, k = string.gsub(a, '\n', '')
while k >= $MaxAnswers do
  a = string.sub(a, string.find(a, '\n', 1, true) + 1)
  k = k - 1
end
r.ndc, r.ans = n, a
-- an unknown outcome that on_unknown_outcome: release lets go counts too
local unknown = ARGV[7] == '1'
if unknown then r.ndu = (tonumber(r.ndu) or 0) + 1 end
local max = tonumber(ARGV[6])
if max > 0 and n >= max then
  -- the budget is used up: held for an operator, never checked (the
  -- upstream said the operation was not done)
  r.st, r.rsn, r.chn, r.exp = 'u', '$ReasonRetriesExhausted', '', now + tonumber(ARGV[5])
  save(r)
  settle(was, 'u', r.exp)
  notice(cur)
  return 2
end
r.st, r.exp = 'r', now + tonumber(ARGV[4])
r.rsn = ARGV[8] -- store.NotDoneRequest.ReleasedReason
save(r)
settle(was, 'r', r.exp)
notice(cur)
return 1
