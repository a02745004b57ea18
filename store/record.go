package store

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// State is the life-cycle state of a record, as operators see it.
type State string

// Record states.
const (
	// StateInFlight: a claimant owns the key and is calling the upstream.
	StateInFlight State = "in_flight"
	// StateCompleted: the outcome is stored and is replayed to retries.
	StateCompleted State = "completed"
	// StateUnknown: nobody knows whether the side effect happened; the record
	// is held for an operator (stored as "unknown").
	StateUnknown State = "outcome_unknown"
	// StateReleased: the attempt is known not to have taken effect; the next
	// claim executes again.
	StateReleased State = "released"
)

// Record is one idempotency record, as every engine gives it back.
type Record struct {
	// ID is the record id (keying.KeyID).
	ID              string
	Route           string
	Operation       string
	Fingerprint     string
	FingerprintRule string
	State           State
	// Token is the current claimant's fencing token.
	Token string
	// StartedAt is when the current (latest) execution was claimed.
	StartedAt   time.Time
	CompletedAt time.Time
	LeaseUntil  time.Time
	// Attempts counts every Claim that reached this record; Executions
	// counts the claims that were allowed to call the upstream.
	Attempts   int64
	Executions int64
	// Result is the upstream's answer of a completed record (zero while
	// none is stored).
	Result
	// Reason says why the outcome is unknown (e.g. "lease_expired"), who
	// resolved the record ("operator", "verified"), or why it was
	// released: ReasonOperator, ReasonVerifiedNotApplied, ReasonNotDone
	// or ReasonUnknownReleased (see RedriveRefusal). A record released
	// before releases said why has "".
	Reason string
	// Audit lists the operator actions taken on the record, oldest first.
	Audit []AuditEntry

	// Verification (see BeginCheck). Check is the lookup the claim kept
	// (zero when its route has none); Checks are the last MaxCheckEntries
	// checks, oldest first, and CheckCount the checks made under the
	// current claim; NextCheck is when the next scheduled check is due
	// (zero: none); NotFoundStreak counts "not applied" answers in a row;
	// a check is running until CheckLeaseUntil.
	Check           Check
	Checks          []CheckEntry
	CheckCount      int64
	NextCheck       time.Time
	NotFoundStreak  int64
	CheckLeaseUntil time.Time

	// The recovery path (see NotDone and Redrive): NotDone counts the
	// executions that ended "not done" (an operator's release starts
	// the count again); Unknowns counts those of them whose outcome was
	// unknown, let go by on_unknown_outcome: release (the upstream may
	// have acted; an operator's release or a verification's "not
	// applied" starts it again); Answers are what the last MaxAnswers of
	// them answered, oldest first; Request is the kept request, sealed by
	// the gateway (nil when its route keeps none, and once completed).
	NotDone  int64
	Unknowns int64
	Answers  []Answer
	Request  []byte

	// Call is the agent's tool call that claimed the record, redacted,
	// on a route guarding an MCP server; nil on any other route (and for
	// records made before records kept it). A claim that creates or
	// takes the record over keeps its own.
	Call *ToolCall
}

// indexStates are the states a listing walks, in listing order.
var indexStates = [...]State{StateInFlight, StateCompleted, StateUnknown, StateReleased}

// storedState is the short name of a state in cursors and index keys
// ("" for an unknown state). It also accepts "unknown".
func storedState(s State) string {
	switch s {
	case StateInFlight:
		return "in_flight"
	case StateCompleted:
		return "completed"
	case StateUnknown, "unknown":
		return "unknown"
	case StateReleased:
		return "released"
	}
	return ""
}

// encodeHeader writes h in HTTP wire format, "Name: value\r\n" per value,
// names in sorted order. Names that cannot appear on the wire (empty or
// containing ':', CR or LF) are skipped; CR and LF inside values become
// spaces, as net/http does when it writes headers.
func encodeHeader(h http.Header) string {
	if len(h) == 0 {
		return ""
	}
	names := make([]string, 0, len(h))
	size := 0
	for name, vv := range h {
		if name == "" || strings.ContainsAny(name, ":\r\n") {
			continue
		}
		names = append(names, name)
		for _, v := range vv {
			size += len(name) + len(v) + 4
		}
	}
	slices.Sort(names)
	var b strings.Builder
	b.Grow(size)
	for _, name := range names {
		for _, v := range h[name] {
			b.WriteString(name)
			b.WriteString(": ")
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			b.WriteString(v)
			b.WriteString("\r\n")
		}
	}
	return b.String()
}

// decodeHeader is the inverse of encodeHeader. Names are kept exactly as
// stored (no re-canonicalisation), values byte for byte. The values of one
// name share one backing array, as net/textproto does.
func decodeHeader(s string) http.Header {
	n := strings.Count(s, "\r\n") + 1
	h := make(http.Header, n)
	values := make([]string, 0, n)
	start, prev := 0, ""
	for s != "" {
		line, rest, _ := strings.Cut(s, "\r\n")
		s = rest
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" {
			continue
		}
		if name != prev {
			setValues(h, prev, values[start:])
			start, prev = len(values), name
		}
		values = append(values, strings.TrimPrefix(value, " "))
	}
	setValues(h, prev, values[start:])
	return h
}

// setValues stores one run of values of name in h. The run is capped so that
// later appends never write into it.
func setValues(h http.Header, name string, run []string) {
	if name == "" {
		return
	}
	if old, ok := h[name]; ok { // the name appeared before (not written by encodeHeader)
		h[name] = append(old[:len(old):len(old)], run...)
		return
	}
	h[name] = run[:len(run):len(run)]
}

// Result is the outcome of an upstream call, as Complete stores it.
type Result struct {
	// Status is the HTTP status.
	Status int
	// Header is the stored response header.
	Header http.Header
	// Body is the response body; nil when omitted.
	Body []byte
	// BodyOmitted is true when the response was too large to store: only
	// status, headers and Digest were kept.
	BodyOmitted bool
	// Digest is the lowercase hex SHA-256 of the full response body.
	Digest string
	// ExternalID is the id the upstream gave the operation's result.
	ExternalID string
}

// NewRecord is the record a claim of a new key creates: what req asked
// for, in flight under req.Token since now (the store's clock), its lease
// running from then, attempts and executions 1.
func NewRecord(req ClaimRequest, now time.Time, lease time.Duration) Record {
	check := req.Check.Normalized()
	check.Match = slices.Clone(check.Match) // not the caller's
	return Record{
		ID:              req.ID,
		Route:           req.Route,
		Operation:       req.Operation,
		Fingerprint:     req.Fingerprint,
		FingerprintRule: req.FingerprintRule,
		State:           StateInFlight,
		Token:           req.Token,
		StartedAt:       now,
		LeaseUntil:      now.Add(time.Duration(msCeil(lease)) * time.Millisecond),
		Attempts:        1,
		Executions:      1,
		Check:           check,
		Request:         slices.Clone(req.Request), // not the caller's
		Call:            req.Call,                  // never changed once made
	}
}
