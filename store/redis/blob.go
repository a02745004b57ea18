package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
)

// A record is stored as one Redis string, so that a claim is one SET NX
// and a completion one SET, each with the key's lifetime in the same
// command:
//
//	[0]       the format: '1', or 'w' for a record a duplicate found in
//	          flight (a waiter may wait for it: its end sends a notice)
//	[1]       state: f in flight, c completed, u outcome unknown, r released
//	[2:12]    attempts, 10 decimal digits
//	[12:22]   executions, 10 digits
//	[22:35]   when the key expires, ms since the epoch (Redis clock), 13 digits
//	[35:48]   when the current execution was claimed, ms, 13 digits
//	[48:61]   when its lease runs out, ms, 13 digits
//	[61:71]   length of the claim part, 10 digits
//	[71:...]  the claim part: claimFields as netstrings "<len>:<bytes>"
//	          then the result part: resultFields as netstrings (absent
//	          while the record has no result)
//
// The fixed widths let a script count an attempt with one SETRANGE, stamp
// a new claim with the Redis clock by splicing in one substring, and tell
// a completion that the record is still the claim it made by comparing two
// substrings, all without parsing. The claim part is what a
// claim writes and only the rarer steps change (renewal, verification,
// operator actions); the result part is what a completion writes. The
// body is last, so a listing reads a record's summary with one GETRANGE
// of its start. The scripts' codec is scripts/record.lua.
const (
	blobFormat     = '1'
	blobWaited     = 'w' // blobFormat, marked by a duplicate (notice.lua)
	blobAttempts   = 2
	blobExecutions = 12
	blobExpires    = 22
	blobStartedAt  = 35
	blobLeaseUntil = 48
	blobClaimLen   = 61
	blobHeader     = 71
)

// Stored states, the state byte.
const (
	stInFlight  = 'f'
	stCompleted = 'c'
	stUnknown   = 'u'
	stReleased  = 'r'
)

// The fields of the claim part, in order. The names are the scripts'.
var claimFields = [...]string{
	"tok",   // claim token (the fence)
	"route", // route name
	"op",    // operation (key namespace)
	"fp",    // request fingerprint
	"fpr",   // text of the fingerprint rule that made fp
	"chk",   // the resolved check: "METHOD URL"; "" for none
	"cha",   // ms from a hold to the first scheduled check
	"chc",   // checks made under the current claim
	"chn",   // ms: when the next scheduled check is due
	"chs",   // counted "not applied" answers in a row
	"chf",   // ms of the last counted "not applied" answer
	"clt",   // the running check's token (the check lease)
	"clu",   // ms: the check lease runs out
	"chl",   // the last checks: "at status verdict" lines, oldest first
	"aud",   // operator actions: JSON objects, one a line, oldest first
	"ndc",   // executions that ended "not done" (the retry budget used)
	"ans",   // what they answered: "at status" lines, oldest first
	"req",   // the kept request, sealed by the gateway (opaque bytes)
	"ndu",   // of ndc, the unknown outcomes that on_unknown_outcome: release let go
	"call",  // the MCP tool call that claimed it, redacted (store.EncodeToolCall); "" for none
}

// The fields of the result part, in order; a release or a takeover clears
// them.
var resultFields = [...]string{
	"ca",  // ms: completed at
	"sc",  // HTTP status
	"bo",  // "1" when only the digest of the body was kept
	"dg",  // hex SHA-256 of the full body
	"eid", // external object id
	"rsn", // why the outcome is unknown, or who resolved it
	"hd",  // "Name: value\r\n" lines
	"bd",  // body bytes
}

// Positions in claimFields and resultFields.
const (
	cToken = iota
	cRoute
	cOperation
	cFingerprint
	cFingerprintRule
	cCheck
	cCheckAfter
	cCheckCount
	cNextCheck
	cNotFoundStreak
	cNotFoundAt
	cCheckToken
	cCheckLeaseUntil
	cChecks
	cAudit
	cNotDone
	cAnswers
	cRequest
	cUnknowns
	cCall
	numClaimFields
)

const (
	rCompletedAt = iota
	rStatus
	rBodyOmitted
	rDigest
	rExternalID
	rReason
	rHeader
	rBody
	numResultFields
)

// blob builds a stored record. Its claim part comes from claim, its result
// part (none when result is nil) from result.
type blob struct {
	state      byte
	attempts   int64
	executions int64
	expires    int64 // ms
	startedAt  int64 // ms
	leaseUntil int64 // ms
	claim      [numClaimFields]string
	result     *[numResultFields]string
	body       []byte // the result's body, kept apart to avoid a copy
}

// encode writes b in the stored form.
func (b *blob) encode() []byte {
	size := blobHeader
	for _, v := range b.claim {
		size += len(v) + 11
	}
	if b.result != nil {
		for _, v := range b.result {
			size += len(v) + 11
		}
		size += len(b.body) + 11
	}
	out := make([]byte, blobHeader, size)
	out[0], out[1] = blobFormat, b.state
	putDigits(out[blobAttempts:blobExecutions], b.attempts)
	putDigits(out[blobExecutions:blobExpires], b.executions)
	putDigits(out[blobExpires:blobStartedAt], b.expires)
	putDigits(out[blobStartedAt:blobLeaseUntil], b.startedAt)
	putDigits(out[blobLeaseUntil:blobClaimLen], b.leaseUntil)
	for _, v := range b.claim {
		out = appendNetstring(out, v)
	}
	putDigits(out[blobClaimLen:blobHeader], int64(len(out)-blobHeader))
	if b.result != nil {
		for i, v := range b.result {
			if i == rBody {
				out = strconv.AppendInt(out, int64(len(b.body)), 10)
				out = append(out, ':')
				out = append(out, b.body...)
				continue
			}
			out = appendNetstring(out, v)
		}
	}
	return out
}

func appendNetstring(b []byte, v string) []byte {
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, ':')
	return append(b, v...)
}

// putDigits writes n into dst as zero-padded decimal digits.
func putDigits(dst []byte, n int64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = byte('0' + n%10)
		n /= 10
	}
}

// decodeBlob reads a stored record. With prefix, s may be the start of one
// (GETRANGE): the fields it does not hold are left empty, and wanted, when
// not 0, is how long a prefix holds every field but the header and body.
func decodeBlob(id, s string, prefix bool) (rec *store.Record, wanted int, err error) {
	if len(s) < blobHeader || (s[0] != blobFormat && s[0] != blobWaited) {
		return nil, 0, fmt.Errorf("store: record %s: not a record of this version", id)
	}
	bad := func(what string) (*store.Record, int, error) {
		return nil, 0, fmt.Errorf("store: record %s: malformed %s", id, what)
	}
	r := &store.Record{ID: id, State: stateFromByte(s[1])}
	if r.State == "" {
		return bad("state")
	}
	var ok bool
	if r.Attempts, ok = digits(s[blobAttempts:blobExecutions]); !ok {
		return bad("attempts")
	}
	if r.Executions, ok = digits(s[blobExecutions:blobExpires]); !ok {
		return bad("executions")
	}
	sa, ok1 := digits(s[blobStartedAt:blobLeaseUntil])
	lu, ok2 := digits(s[blobLeaseUntil:blobClaimLen])
	if !ok1 || !ok2 {
		return bad("times")
	}
	r.StartedAt, r.LeaseUntil = msTimeOf(sa), msTimeOf(lu)
	claimLen, ok := digits(s[blobClaimLen:blobHeader])
	if !ok {
		return bad("claim length")
	}
	if int64(len(s)) < blobHeader+claimLen {
		if prefix {
			return nil, blobHeader + int(claimLen) + 1024, nil
		}
		return bad("claim part")
	}
	var c [numClaimFields]string
	rest := s[blobHeader : blobHeader+claimLen]
	for i := range c {
		if rest == "" && i > cAudit {
			break // a record written before the recovery fields
		}
		if c[i], rest, ok = netstring(rest); !ok {
			return bad("claim part")
		}
	}
	r.Token, r.Route, r.Operation = c[cToken], c[cRoute], c[cOperation]
	r.Fingerprint, r.FingerprintRule = c[cFingerprint], c[cFingerprintRule]
	r.Audit = decodeAudit(c[cAudit])
	decodeChecks(r, &c)
	r.NotDone, r.Unknowns, r.Answers = intOf(c[cNotDone]), intOf(c[cUnknowns]), decodeAnswers(c[cAnswers])
	if c[cRequest] != "" {
		r.Request = []byte(c[cRequest])
	}
	r.Call = store.DecodeToolCall([]byte(c[cCall]))
	rest = s[blobHeader+claimLen:]
	var res [numResultFields]string
	for i := range res {
		if rest == "" {
			break
		}
		var v string
		if v, rest, ok = netstring(rest); !ok {
			switch {
			case !prefix:
				return bad("result part")
			case i < rHeader:
				return nil, 2 * len(s), nil
			}
			break // a prefix that ends in the header or body
		}
		res[i] = v
	}
	r.CompletedAt = msOf(res[rCompletedAt])
	if res[rStatus] != "" {
		n, err := strconv.Atoi(res[rStatus])
		if err != nil {
			return bad("status")
		}
		r.Status = n
	}
	r.BodyOmitted = res[rBodyOmitted] == "1"
	r.Digest, r.ExternalID, r.Reason = res[rDigest], res[rExternalID], res[rReason]
	if res[rHeader] != "" {
		r.Header = store.DecodeHeader(res[rHeader])
	}
	if res[rBody] != "" {
		r.Body = []byte(res[rBody])
	}
	return r, 0, nil
}

// netstring splits "<len>:<bytes>" off the front of s.
func netstring(s string) (v, rest string, ok bool) {
	colon := strings.IndexByte(s, ':')
	if colon < 1 || colon > 10 {
		return "", s, false
	}
	n, err := strconv.Atoi(s[:colon])
	if err != nil || n < 0 || n > len(s)-colon-1 {
		return "", s, false
	}
	return s[colon+1 : colon+1+n], s[colon+1+n:], true
}

func digits(s string) (int64, bool) {
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// msOf reads a ms field; zero for "" or a malformed one.
func msOf(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

func msTimeOf(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

func intOf(s string) int64 {
	if s == "" {
		return 0 // the usual empty field: no parse, no error to allocate
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func stateFromByte(c byte) store.State {
	switch c {
	case stInFlight:
		return store.StateInFlight
	case stCompleted:
		return store.StateCompleted
	case stUnknown:
		return store.StateUnknown
	case stReleased:
		return store.StateReleased
	}
	return ""
}

func stateFromStored(s string) store.State {
	switch s {
	case "in_flight":
		return store.StateInFlight
	case "completed":
		return store.StateCompleted
	case "unknown":
		return store.StateUnknown
	case "released":
		return store.StateReleased
	}
	return store.State(s)
}

var errShortReply = errors.New("store: malformed record reply")
