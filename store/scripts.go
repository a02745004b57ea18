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
	numFields
)

var fields = [numFields]string{
	fState, fToken, fRoute, fOperation, fFingerprint, fFingerprintRule,
	fStartedAt, fCompletedAt, fLeaseUntil, fAttempts, fExecutions,
	fStatus, fHeader, fBody, fBodyOmitted, fDigest, fExternalID, fReason,
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
)

// luaNow is the prelude of every script: the Redis server's clock in ms.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaFields is the Lua argument list of every record field, in fields order.
var luaFields = "'" + strings.Join(fields[:], "', '") + "'"

// luaResultFields are the fields of a result (cleared on release/reclaim).
const luaResultFields = `'ca', 'sc', 'hd', 'bd', 'bo', 'dg', 'eid', 'rsn'`

// claimScript: KEYS[1] = record key.
// ARGV: 1 token, 2 route, 3 operation, 4 fingerprint, 5 fingerprint rule,
// 6 lease ms, 7 hold ttl ms, 8 on expired ("hold" | "release").
// Reply: {code, <fields...>}.
var claimScript = redis.NewScript(luaNow + `
local key = KEYS[1]
local tok = ARGV[1]
local lease = tonumber(ARGV[6])
local hold = tonumber(ARGV[7])
local cur = redis.call('HMGET', key, 'st', 'tok', 'lu', 'fp', 'fpr')
local st = cur[1]
local code = ` + itoa(codeExisting) + `
if not st then
  redis.call('HSET', key, 'st', 'in_flight', 'tok', tok, 'route', ARGV[2], 'op', ARGV[3],
    'fp', ARGV[4], 'fpr', ARGV[5], 'sa', now, 'lu', now + lease, 'att', 1, 'exe', 1)
  redis.call('PEXPIRE', key, hold)
  code = ` + itoa(codeCreated) + `
elseif st == 'in_flight' and cur[2] == tok then
  code = ` + itoa(codeOwned) + `
else
  local expired = st == 'in_flight' and tonumber(cur[3] or '0') <= now
  local same = cur[4] == ARGV[4] and cur[5] == ARGV[5]
  redis.call('HINCRBY', key, 'att', 1)
  if expired and ARGV[8] ~= 'release' then
    redis.call('HSET', key, 'st', 'unknown', 'rsn', 'lease_expired')
    redis.call('PEXPIRE', key, hold)
  elseif same and (expired or st == 'released') then
    redis.call('HDEL', key, ` + luaResultFields + `)
    redis.call('HSET', key, 'st', 'in_flight', 'tok', tok, 'route', ARGV[2], 'sa', now, 'lu', now + lease)
    redis.call('HINCRBY', key, 'exe', 1)
    redis.call('PEXPIRE', key, hold)
    code = ` + itoa(codeTakeOver) + `
  end
end
local r = redis.call('HMGET', key, ` + luaFields + `)
table.insert(r, 1, code)
return r
`)

// renewScript: ARGV: 1 token, 2 lease ms. Reply 1 when renewed, else 0.
var renewScript = redis.NewScript(luaNow + `
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[1] ~= 'in_flight' or cur[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lu', now + tonumber(ARGV[2]))
return 1
`)

// completeScript: ARGV: 1 token, 2 status, 3 header, 4 body, 5 body omitted
// ("1"/"0"), 6 digest, 7 external id, 8 ttl ms. Reply 1 when stored, else 0.
var completeScript = redis.NewScript(luaNow + `
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'rsn')
redis.call('HSET', KEYS[1], 'st', 'completed', 'ca', now, 'sc', ARGV[2], 'hd', ARGV[3],
  'bd', ARGV[4], 'bo', ARGV[5], 'dg', ARGV[6], 'eid', ARGV[7])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[8]))
return 1
`)

// releaseScript: ARGV: 1 token, 2 ttl ms. Reply 1 when released, else 0.
var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], ` + luaResultFields + `)
redis.call('HSET', KEYS[1], 'st', 'released')
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
`)

// markUnknownScript: ARGV: 1 token, 2 reason, 3 hold ttl ms. Reply 1 when
// marked, else 0. A completed record is never demoted.
var markUnknownScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'st', 'tok')
if cur[2] ~= ARGV[1] or cur[1] == 'completed' then return 0 end
redis.call('HSET', KEYS[1], 'st', 'unknown', 'rsn', ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
`)

var allScripts = []*redis.Script{claimScript, renewScript, completeScript, releaseScript, markUnknownScript}

func itoa(i int) string { return strconv.Itoa(i) }
