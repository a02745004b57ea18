package store

import (
	"net/http"
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

// StateExhausted is how operators see a record held for
// ReasonRetriesExhausted (see Record.Class). Engines keep it as
// StateUnknown with that reason, so it lives as long as a held record
// (hold_ttl) and is listed with the held records.
const StateExhausted State = "retries_exhausted"

// ReasonRetriesExhausted is the reason of a record held because its
// operation used up its retry budget: known not done, waiting for an
// operator.
const ReasonRetriesExhausted = "retries exhausted"

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

// Class is the record's state as operators see it: StateExhausted for a
// record held because its retries were used up, else State.
func (r *Record) Class() State {
	if r.State == StateUnknown && r.Reason == ReasonRetriesExhausted {
		return StateExhausted
	}
	return r.State
}

// CheckRunning reports whether a verification check holds the record at
// now (a live check lease on a held record): operators act once it ends.
func (r *Record) CheckRunning(now time.Time) bool {
	return r.State == StateUnknown && r.CheckLeaseUntil.After(now)
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

// The entries of a record's lists, oldest first.

// AuditEntry is one operator action kept on a record, oldest first.
type AuditEntry struct {
	At     time.Time // the store's clock when the action took effect
	Actor  string
	Action string // AuditRelease, AuditComplete or AuditVerify
	Reason string
}

// CheckEntry is one check kept on a record.
type CheckEntry struct {
	At      time.Time // the store's clock when the check ended
	Status  int       // the lookup's HTTP status; 0 when it gave none
	Verdict string    // one of the Verdict constants
}

// Answer is what one execution that ended "not done" answered.
type Answer struct {
	At     time.Time // the store's clock when it was recorded
	Status int       // the status the client got (502 for a request that never left)
}
