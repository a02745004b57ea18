package store

import (
	"embed"
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

// The Lua scripts live in scripts/*.lua. A script is its files joined in
// order: the preludes (now.lua: the Redis clock; index.lua: the record's
// state indexes and settle; audit.lua: the operator audit trail), its own
// file, and the reply (reply.lua: code and record; reply_clock.lua: code,
// clock and record). $name placeholders in the files stand for the Go
// constants below, so the scripts and the code that reads their replies
// share one definition.
//
//go:embed scripts/*.lua
var luaFiles embed.FS

// luaConstants replaces the $name placeholders of the script files.
// Longer names come first where one is a prefix of another.
var luaConstants = strings.NewReplacer(
	"$codeExisting", strconv.Itoa(codeExisting),
	"$codeCreated", strconv.Itoa(codeCreated),
	"$codeTakeOver", strconv.Itoa(codeTakeOver),
	"$codeOwned", strconv.Itoa(codeOwned),
	"$codeLate", strconv.Itoa(codeLate),
	"$codeDone", strconv.Itoa(codeDone),
	"$codeNotFound", strconv.Itoa(codeNotFound),
	"$codeConflict", strconv.Itoa(codeConflict),
	"$codeCheckRefused", strconv.Itoa(codeCheckRefused),
	"$codeCheckHeld", strconv.Itoa(codeCheckHeld),
	"$codeCheckApplied", strconv.Itoa(codeCheckApplied),
	"$codeCheckReleased", strconv.Itoa(codeCheckReleased),
	"$MaxAuditEntries", strconv.Itoa(MaxAuditEntries),
	// Lua positions (1-based) of the record fields the claim reads.
	"$iState", strconv.Itoa(iState+1),
	"$iToken", strconv.Itoa(iToken+1),
	"$iFingerprintRule", strconv.Itoa(iFingerprintRule+1),
	"$iFingerprint", strconv.Itoa(iFingerprint+1),
	"$iLeaseUntil", strconv.Itoa(iLeaseUntil+1),
	"$iAttempts", strconv.Itoa(iAttempts+1),
	"$iCheckAfter", strconv.Itoa(iCheckAfter+1),
	"$MaxCheckEntries", strconv.Itoa(MaxCheckEntries),
	"$ReasonVerifiedNotApplied", ReasonVerifiedNotApplied,
	"$ReasonVerified", ReasonVerified,
	// Every record field, in fields order (HMGET of the whole record).
	"$fields", "'"+strings.Join(fields[:], "', '")+"'",
	// The fields of a result, cleared on release and takeover.
	"$resultFields", `'ca', 'sc', 'hd', 'bd', 'bo', 'dg', 'eid', 'rsn'`,
	// The verification fields of one claim, cleared when a new claim
	// takes the record over; the check log stays.
	"$checkState", `'chc', 'chn', 'chs', 'chf', 'clt', 'clu'`,
)

// script assembles one script from its files.
func script(files ...string) *redis.Script {
	var b strings.Builder
	for _, f := range files {
		src, err := luaFiles.ReadFile("scripts/" + f + ".lua")
		if err != nil {
			panic("store: " + err.Error()) // embedded: cannot happen in a built binary
		}
		b.Write(src)
	}
	return redis.NewScript(luaConstants.Replace(b.String()))
}

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
var claimScript = script("now_lazy", "index", "claim", "reply_clock")

// renewScript: KEYS = record key. ARGV: 1 id, 2 token, 3 lease ms.
// Reply 1 when renewed, else 0. The key's lifetime and index entry stay.
var renewScript = script("now", "renew")

// completeScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 token, 3 status, 4 header, 5 body, 6 body omitted
// ("1"/"0"), 7 digest, 8 external id, 9 ttl ms, 10 route, 11 operation,
// 12 fingerprint, 13 fingerprint rule, 14 started at ms. Reply 1 when
// stored, else 0. A record that is gone (a failover lost the claim) is
// written anew from ARGV 10-14, with one attempt and one execution.
var completeScript = script("now", "index", "complete")

// releaseScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 token, 3 ttl ms. Reply 1 when released, else 0.
var releaseScript = script("now", "index", "release")

// markUnknownScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 token, 3 reason, 4 hold ttl ms. Reply 1 when marked, else
// 0. A completed record is never demoted. A record that carries a check
// is due for its first scheduled check its after ms from now.
var markUnknownScript = script("now", "index", "mark_unknown")

// operatorReleaseScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 new token, 3 ttl ms, 4 audit entry. Reply: {code, <fields...>}.
// Any state but a live in-flight claim becomes released under a new token.
var operatorReleaseScript = script("now", "index", "audit", "operator_release", "reply")

// operatorCompleteScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 new token, 3 status, 4 header, 5 body, 6 body omitted,
// 7 digest, 8 external id, 9 ttl ms, 10 audit entry. Reply: {code, <fields...>}.
// Unknown, released and lease-expired in-flight records become completed.
var operatorCompleteScript = script("now", "index", "audit", "operator_complete", "reply")

// beginCheckScript: KEYS = record key. ARGV: 1 id, 2 claim token, 3 check
// token, 4 lease ms, 5 due ("1": only when the next check is due).
// Reply: {code, now ms, <fields...>}; code 1 when the lease is the
// caller's. The record's lifetime and index entry stay.
var beginCheckScript = script("now", "begin_check", "reply_clock")

// endCheckScript: KEYS = record key and its shard's indexes.
// ARGV: 1 id, 2 claim token, 3 check token, 4 entry status, 5 verdict,
// 6 not found checks, 7 every ms, 8 next ms (0: none), 9 ttl ms,
// 10 result status, 11 result header, 12 result body, 13 result digest,
// 14 external id, 15 audit entry of an operator's check ("" for none).
// Reply: {code, now ms, <fields...>}.
var endCheckScript = script("now", "index", "audit", "end_check", "reply_clock")

var allScripts = []*redis.Script{
	claimScript, renewScript, completeScript, releaseScript, markUnknownScript,
	operatorReleaseScript, operatorCompleteScript,
	beginCheckScript, endCheckScript,
}

// Codes of the end check script.
const (
	codeCheckRefused  = 0 // not under the lease and claim: nothing changed
	codeCheckHeld     = 1 // recorded; the record stays held
	codeCheckApplied  = 2 // recorded; completed with the lookup's answer
	codeCheckReleased = 3 // recorded; released
)
