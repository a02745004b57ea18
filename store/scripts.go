package store

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Record hash fields. fields is the fixed order in which every record is read
// (HMGET), inside the scripts and by Get, and in which decodeRecord expects it.
const (
	fState           = "st"    // in_flight | completed | unknown | released
	fToken           = "tok"   // claim token (the fence)
	fRoute           = "route" // route name
	fOperation       = "op"    // operation (key namespace)
	fFingerprint     = "fp"    // request fingerprint
	fFingerprintRule = "fpr"   // text of the fingerprint rule that made fp
	fStartedAt       = "sa"    // ms since the epoch, Redis clock
	fCompletedAt     = "ca"    // ms
	fLeaseUntil      = "lu"    // ms
	fAttempts        = "att"   // requests that reached the record
	fExecutions      = "exe"   // claims that ran (or may have run) the upstream
	fStatus          = "sc"    // stored HTTP status
	fHeader          = "hd"    // "Name: value\r\n" lines
	fBody            = "bd"    // body bytes
	fBodyOmitted     = "bo"    // "1" when only the digest was kept
	fDigest          = "dg"    // hex SHA-256 of the full body
	fExternalID      = "eid"   // external object id
	fReason          = "rsn"   // why the outcome is unknown
	fAudit           = "aud"   // operator actions: JSON objects, one a line, oldest first
	// Verification (see check.go); absent on routes without verify.
	fCheck           = "chk" // the resolved check: "METHOD URL"
	fCheckAfter      = "cha" // ms from a hold to the first scheduled check
	fChecks          = "chl" // the last checks: "at status verdict" lines, oldest first
	fCheckCount      = "chc" // checks made under the current claim
	fNextCheck       = "chn" // ms: when the next scheduled check is due
	fNotFoundStreak  = "chs" // counted "not applied" answers in a row
	fNotFoundAt      = "chf" // ms of the last counted "not applied" answer
	fCheckToken      = "clt" // the running check's token (the check lease)
	fCheckLeaseUntil = "clu" // ms: the check lease runs out
)

// Field positions in fields.
const (
	iState = iota
	iToken
	iRoute
	iOperation
	iFingerprint
	iFingerprintRule
	iStartedAt
	iCompletedAt
	iLeaseUntil
	iAttempts
	iExecutions
	iStatus
	iHeader
	iBody
	iBodyOmitted
	iDigest
	iExternalID
	iReason
	iAudit
	iCheck
	iCheckAfter
	iChecks
	iCheckCount
	iNextCheck
	iNotFoundStreak
	iNotFoundAt
	iCheckToken
	iCheckLeaseUntil
	numFields
)

var fields = [numFields]string{
	fState, fToken, fRoute, fOperation, fFingerprint, fFingerprintRule,
	fStartedAt, fCompletedAt, fLeaseUntil, fAttempts, fExecutions,
	fStatus, fHeader, fBody, fBodyOmitted, fDigest, fExternalID, fReason,
	fAudit,
	fCheck, fCheckAfter, fChecks, fCheckCount, fNextCheck, fNotFoundStreak,
	fNotFoundAt, fCheckToken, fCheckLeaseUntil,
}

// Stored state values. StateUnknown is stored in its short form.
const (
	stInFlight  = "in_flight"
	stCompleted = "completed"
	stUnknown   = "unknown"
	stReleased  = "released"
)

// Claim outcome codes, the first element of the claim script's reply.
const (
	codeExisting = 0 // not claimed: the record belongs to someone else (or is done)
	codeCreated  = 1 // claimed a new record
	codeTakeOver = 2 // claimed a released record or one whose lease ran out
	codeOwned    = 3 // already held with this token (a retried Claim)
	codeLate     = 4 // the claim reached Redis after its caller gave up: refused, nothing changed
)

// Operator script codes, the first element of their replies.
const (
	codeDone     = 1 // the record was resolved
	codeNotFound = 2 // no such record
	codeConflict = 3 // the record's state does not allow the operation
)

// luaNow is the prelude of every script: the Redis server's clock in ms.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaIndex is the prelude of every state-changing script. KEYS[1] is the
// record, KEYS[2..5] the state indexes of its shard (indexStates order),
// ARGV[1] the record id (the index member). settle(old, new, ttl) gives the
// record its lifetime (PEXPIRE ttl ms) and moves it from the old state's
// index to the new one's, scored with its expiry time; expired members of
// the index written are trimmed on the way. The caller sets the st field.
const luaIndex = luaNow + `
local id = ARGV[1]
local idx = {in_flight = KEYS[2], completed = KEYS[3], unknown = KEYS[4], released = KEYS[5]}
local function settle(old, new, ttl)
  redis.call('PEXPIRE', KEYS[1], ttl)
  if old and old ~= new and idx[old] then
    redis.call('ZREM', idx[old], id)
  end
  redis.call('ZADD', idx[new], now + ttl, id)
  redis.call('ZREMRANGEBYSCORE', idx[new], '-inf', now)
end
`

// luaFields is the Lua argument list of every record field, in fields order.
var luaFields = "'" + strings.Join(fields[:], "', '") + "'"

// luaResultFields are the fields of a result (cleared on release/reclaim).
const luaResultFields = `'ca', 'sc', 'hd', 'bd', 'bo', 'dg', 'eid', 'rsn'`

// luaCheckState are the verification fields of one claim (cleared when a
// new claim takes the record over); the check log stays.
const luaCheckState = `'chc', 'chn', 'chs', 'chf', 'clt', 'clu'`

// luaReply ends the scripts that answer with a code and the record.
var luaReply = `
local r = redis.call('HMGET', KEYS[1], ` + luaFields + `)
table.insert(r, 1, code)
return r
`

// luaClaimReply ends the claim script: the code, the Redis clock the
// script decided by (ms), and the record.
var luaClaimReply = `
local r = redis.call('HMGET', KEYS[1], ` + luaFields + `)
table.insert(r, 1, now)
table.insert(r, 1, code)
return r
`

// claimScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 token, 3 route, 4 operation, 5 fingerprint, 6 fingerprint
// rule, 7 lease ms, 8 hold ttl ms, 9 on expired ("hold" | "release"),
// 10 not after (Redis clock ms; 0 = no limit), 11 the resolved check
// ("METHOD URL", "" for none), 12 the check's after ms.
// Reply: {code, now ms, <fields...>}, or {late code, now ms} when the claim
// ran after ARGV[10]: its caller has given up on it, and a claim nobody
// waits for would hold the key until its lease ran out; or {created code,
// now ms} for a new record, which holds exactly what ARGV says (the caller
// builds it without reading it back).
var claimScript = redis.NewScript(luaIndex + `
local notAfter = tonumber(ARGV[10])
if notAfter > 0 and now > notAfter then
  return {` + itoa(codeLate) + `, now}
end
local key = KEYS[1]
local tok = ARGV[2]
local lease = tonumber(ARGV[7])
local hold = tonumber(ARGV[8])
local cur = redis.call('HMGET', key, 'st', 'tok', 'lu', 'fp', 'fpr', 'cha')
local st = cur[1]
local code = ` + itoa(codeExisting) + `
if not st then
  redis.call('HSET', key, 'st', 'in_flight', 'tok', tok, 'route', ARGV[3], 'op', ARGV[4],
    'fp', ARGV[5], 'fpr', ARGV[6], 'sa', now, 'lu', now + lease, 'att', 1, 'exe', 1)
  if ARGV[11] ~= '' then
    redis.call('HSET', key, 'chk', ARGV[11], 'cha', ARGV[12])
  end
  settle(false, 'in_flight', hold)
  return {` + itoa(codeCreated) + `, now}
elseif st == 'in_flight' and cur[2] == tok then
  code = ` + itoa(codeOwned) + `
else
  local expired = st == 'in_flight' and tonumber(cur[3] or '0') <= now
  local same = cur[4] == ARGV[5] and cur[5] == ARGV[6]
  redis.call('HINCRBY', key, 'att', 1)
  if expired and ARGV[9] ~= 'release' then
    redis.call('HSET', key, 'st', 'unknown', 'rsn', 'lease_expired')
    if cur[6] then
      redis.call('HSET', key, 'chn', now + tonumber(cur[6]))
    end
    settle(st, 'unknown', hold)
  elseif same and (expired or st == 'released') then
    redis.call('HDEL', key, ` + luaResultFields + `, ` + luaCheckState + `)
    redis.call('HSET', key, 'st', 'in_flight', 'tok', tok, 'route', ARGV[3], 'sa', now, 'lu', now + lease)
    if ARGV[11] ~= '' then
      redis.call('HSET', key, 'chk', ARGV[11], 'cha', ARGV[12])
    else
      redis.call('HDEL', key, 'chk', 'cha')
    end
    redis.call('HINCRBY', key, 'exe', 1)
    settle(st, 'in_flight', hold)
    code = ` + itoa(codeTakeOver) + `
  end
end
` + luaClaimReply)

// renewScript: KEYS = record key. ARGV: 1 id, 2 token, 3 lease ms.
// Reply 1 when renewed, else 0. The key's lifetime and index entry stay.
var renewScript = redis.NewScript(luaNow + `
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_flight' or cur[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'lu', now + tonumber(ARGV[3]))
return 1
`)

// completeScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 token, 3 status, 4 header, 5 body, 6 body omitted
// ("1"/"0"), 7 digest, 8 external id, 9 ttl ms, 10 route, 11 operation,
// 12 fingerprint, 13 fingerprint rule, 14 started at ms. Reply 1 when
// stored, else 0. A record that is gone (a failover lost the claim) is
// written anew from ARGV 10-14, with one attempt and one execution.
var completeScript = redis.NewScript(luaIndex + `
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if not cur[1] then
  redis.call('HSET', KEYS[1], 'tok', ARGV[2], 'route', ARGV[10], 'op', ARGV[11],
    'fp', ARGV[12], 'fpr', ARGV[13], 'sa', ARGV[14], 'lu', ARGV[14], 'att', 1, 'exe', 1)
elseif cur[2] ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[1], 'rsn')
redis.call('HSET', KEYS[1], 'st', 'completed', 'ca', now, 'sc', ARGV[3], 'hd', ARGV[4],
  'bd', ARGV[5], 'bo', ARGV[6], 'dg', ARGV[7], 'eid', ARGV[8])
settle(cur[1], 'completed', tonumber(ARGV[9]))
return 1
`)

// releaseScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 token, 3 ttl ms. Reply 1 when released, else 0.
var releaseScript = redis.NewScript(luaIndex + `
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[2] ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ` + luaResultFields + `)
redis.call('HSET', KEYS[1], 'st', 'released')
settle(cur[1], 'released', tonumber(ARGV[3]))
return 1
`)

// markUnknownScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 token, 3 reason, 4 hold ttl ms. Reply 1 when marked, else
// 0. A completed record is never demoted. A record that carries a check
// is due for its first scheduled check its after ms from now.
var markUnknownScript = redis.NewScript(luaIndex + `
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok', 'cha')
if cur[2] ~= ARGV[2] or cur[1] == 'completed' then return 0 end
redis.call('HSET', KEYS[1], 'st', 'unknown', 'rsn', ARGV[3])
if cur[3] then
  redis.call('HSET', KEYS[1], 'chn', now + tonumber(cur[3]))
end
settle(cur[1], 'unknown', tonumber(ARGV[4]))
return 1
`)

// luaAudit is the prelude of the operator scripts: audit(entry) appends
// one operator action to the record's audit field, a JSON object per line
// with the script's clock as "at" (ms) before the caller's fields (entry is
// the rest of the object, from `"actor":`, already JSON-encoded), and keeps
// the last MaxAuditEntries lines.
var luaAudit = luaIndex + `
local function audit(entry)
  local line = '{"at":' .. string.format('%d', now) .. ',' .. entry
  local a = redis.call('HGET', KEYS[1], 'aud')
  if a then a = a .. '\n' .. line else a = line end
  local _, n = string.gsub(a, '\n', '')
  while n >= ` + itoa(MaxAuditEntries) + ` do
    a = string.sub(a, string.find(a, '\n', 1, true) + 1)
    n = n - 1
  end
  redis.call('HSET', KEYS[1], 'aud', a)
end
`

// operatorReleaseScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 new token, 3 ttl ms, 4 audit entry. Reply: {code, <fields...>}.
// Any state but a live in-flight claim becomes released under a new token.
var operatorReleaseScript = redis.NewScript(luaAudit + `
local cur = redis.call('HMGET', KEYS[1], 'st', 'lu')
local st = cur[1]
local code = ` + itoa(codeDone) + `
if not st then
  code = ` + itoa(codeNotFound) + `
elseif st == 'in_flight' and tonumber(cur[2] or '0') > now then
  code = ` + itoa(codeConflict) + `
else
  redis.call('HDEL', KEYS[1], ` + luaResultFields + `)
  redis.call('HSET', KEYS[1], 'st', 'released', 'tok', ARGV[2], 'rsn', 'operator')
  audit(ARGV[4])
  settle(st, 'released', tonumber(ARGV[3]))
end
` + luaReply)

// operatorCompleteScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 new token, 3 status, 4 header, 5 body, 6 body omitted,
// 7 digest, 8 external id, 9 ttl ms, 10 audit entry. Reply: {code, <fields...>}.
// Unknown, released and lease-expired in-flight records become completed.
var operatorCompleteScript = redis.NewScript(luaAudit + `
local cur = redis.call('HMGET', KEYS[1], 'st', 'lu')
local st = cur[1]
local code = ` + itoa(codeDone) + `
if not st then
  code = ` + itoa(codeNotFound) + `
elseif st == 'completed' or (st == 'in_flight' and tonumber(cur[2] or '0') > now) then
  code = ` + itoa(codeConflict) + `
else
  redis.call('HSET', KEYS[1], 'st', 'completed', 'tok', ARGV[2], 'ca', now, 'sc', ARGV[3],
    'hd', ARGV[4], 'bd', ARGV[5], 'bo', ARGV[6], 'dg', ARGV[7], 'eid', ARGV[8], 'rsn', 'operator')
  audit(ARGV[10])
  settle(st, 'completed', tonumber(ARGV[9]))
end
` + luaReply)

var allScripts = []*redis.Script{
	claimScript, renewScript, completeScript, releaseScript, markUnknownScript,
	operatorReleaseScript, operatorCompleteScript,
	beginCheckScript, endCheckScript,
}

func itoa(i int) string { return strconv.Itoa(i) }
