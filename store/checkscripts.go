package store

import "github.com/redis/go-redis/v9"

// luaCheckReply ends the check scripts: the code, the Redis clock the
// script decided by (ms), and the record.
var luaCheckReply = `
local r = redis.call('HMGET', KEYS[1], ` + luaFields + `)
table.insert(r, 1, now)
table.insert(r, 1, code)
return r
`

// beginCheckScript: KEYS = record key. ARGV: 1 id, 2 claim token, 3 check
// token, 4 lease ms, 5 due ("1": only when the next check is due).
// Reply: {code, now ms, <fields...>}; code 1 when the lease is the
// caller's. The record's lifetime and index entry stay.
var beginCheckScript = redis.NewScript(luaNow + `
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
` + luaCheckReply)

// Codes of the end check script.
const (
	codeCheckRefused  = 0 // not under the lease and claim: nothing changed
	codeCheckHeld     = 1 // recorded; the record stays held
	codeCheckApplied  = 2 // recorded; completed with the lookup's answer
	codeCheckReleased = 3 // recorded; released
)

// endCheckScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 claim token, 3 check token, 4 entry status, 5 verdict,
// 6 not found checks, 7 every ms, 8 next ms (0: none), 9 ttl ms,
// 10 result status, 11 result header, 12 result body, 13 result digest,
// 14 external id, 15 audit entry of an operator's check ("" for none).
// Reply: {code, now ms, <fields...>}.
var endCheckScript = redis.NewScript(luaAudit + `
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'st', 'tok', 'clt', 'chs', 'chf', 'chl')
local code = ` + itoa(codeCheckRefused) + `
if cur[1] == 'unknown' and cur[2] == ARGV[2] and cur[3] == ARGV[3] then
  code = ` + itoa(codeCheckHeld) + `
  local line = string.format('%d', now) .. ' ' .. ARGV[4] .. ' ' .. ARGV[5]
  local log = cur[6]
  if log and log ~= '' then log = log .. '\n' .. line else log = line end
  local _, n = string.gsub(log, '\n', '')
  while n >= ` + itoa(MaxCheckEntries) + ` do
    log = string.sub(log, string.find(log, '\n', 1, true) + 1)
    n = n - 1
  end
  redis.call('HSET', key, 'chl', log)
  redis.call('HINCRBY', key, 'chc', 1)
  redis.call('HDEL', key, 'clt', 'clu')
  if ARGV[15] ~= '' then audit(ARGV[15]) end
  local verdict = ARGV[5]
  local ttl = tonumber(ARGV[9])
  local streak = tonumber(cur[4] or '0')
  if verdict == 'not_applied' then
    local last = tonumber(cur[5] or '0')
    if last == 0 or now - last >= tonumber(ARGV[7]) then
      streak = streak + 1
      redis.call('HSET', key, 'chs', streak, 'chf', now)
    end
  end
  if verdict == 'applied' then
    redis.call('HDEL', key, 'chn')
    redis.call('HSET', key, 'st', 'completed', 'tok', ARGV[3], 'ca', now, 'sc', ARGV[10],
      'hd', ARGV[11], 'bd', ARGV[12], 'bo', '0', 'dg', ARGV[13], 'eid', ARGV[14], 'rsn', '` + ReasonVerified + `')
    settle('unknown', 'completed', ttl)
    code = ` + itoa(codeCheckApplied) + `
  elseif verdict == 'not_applied' and streak >= tonumber(ARGV[6]) then
    redis.call('HDEL', key, ` + luaResultFields + `, 'chn')
    redis.call('HSET', key, 'st', 'released', 'tok', ARGV[3], 'rsn', '` + ReasonVerifiedNotApplied + `')
    settle('unknown', 'released', ttl)
    code = ` + itoa(codeCheckReleased) + `
  elseif tonumber(ARGV[8]) > 0 then
    redis.call('HSET', key, 'chn', now + tonumber(ARGV[8]))
  else
    redis.call('HDEL', key, 'chn')
  end
end
` + luaCheckReply)
