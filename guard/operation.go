package guard

import (
	"errors"
	"time"

	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// Operation is one guarded request as the steps read it. The adapter
// builds it once, from the request (its key, fingerprint and id, the
// check its claim keeps, the request sealed for a re-drive), and nothing
// writes it afterwards.
type Operation struct {
	Route *Route
	// Method is the request's method in upper case, as the route matched
	// it (a retry sent as `post` is the same request as POST).
	Method string
	In     *keying.Input // the request as the key and the fingerprint read it
	Key    string        // the idempotency key; "" when the request has none
	// KeyFrom is the index of the route's key template the key came from.
	KeyFrom int
	Scope   [32]byte // the scope the key is hashed with (keying.ScopeHash, or the signed sender's)
	ID      string   // the key id; the key itself is never logged
	FP      string   // the request's fingerprint under the route's rule
	// Payload is the operation's PayloadID on a route with
	// same_payload_window, else "".
	Payload string
	Check   store.Check // the route's check resolved from the request (zero: none)
	Sealed  []byte      // the request sealed for a re-drive (keep_request), else nil
	Call    *ToolCall   // the MCP tool call (a route with protocol: mcp), else nil
}

// Found is what a claim found of the key's record, and what happened on
// the way (a settlement with the upstream, a wait for the first request).
type Found struct {
	Record *store.Record // the record that answers the request; nil with a claim
	// Now is the store's clock at the claim: lease times compare with it.
	Now  time.Time
	Late *store.Tombstone // the tombstone of the key's expired record, if any
	Twin *store.Twin      // the operation completed with this payload under another key, if any
	Note string           // what the claim's way says for the log line
	// Waited is how long the request waited for the first one
	// (on_in_flight: wait).
	Waited time.Duration
}

// Outcome is what became of a guarded request, as counted in metrics,
// written to the decision's log line and set on its placeholders and
// span. The adapter sets it in one place, from what the step that
// answered returns and what the claim found.
type Outcome struct {
	Name   string // one of the Outcome* names
	Status int    // the status the client got (0: none yet)
	Note   string
	Would  string // observe mode: what enforce would have done
	// Record is the record the request found or executed under, for its
	// attempt and execution counts; Waited: see Found.
	Record *store.Record
	Waited time.Duration
}

// Outcome names, as counted in metrics and written to logs.
const (
	OutcomeExecuted   = "executed"
	OutcomeReplayed   = "replayed"
	OutcomeInFlight   = "in_flight"
	OutcomeMismatch   = "mismatch"
	OutcomeMissingKey = "missing_key"
	OutcomeUnknown    = "unknown_outcome"
	OutcomeStoreError = "store_error"
	OutcomeBypassed   = "bypassed"
	OutcomeInvalid    = "invalid_request"
	// OutcomeBreakerOpen: the route's breaker refused a new execution.
	OutcomeBreakerOpen = "breaker_open"
	// OutcomeExhausted: the operation used up its retry budget and is
	// held for an operator.
	OutcomeExhausted = "retries_exhausted"
	// OutcomeExpired: a retry after its record expired, refused
	// (after_expiry: reject).
	OutcomeExpired = "expired"
	// OutcomeSamePayload: the payload completed under another key, held
	// or refused (on_same_payload).
	OutcomeSamePayload = "same_payload"
	// OutcomeObserved: a route in observe mode forwarded a request that
	// enforce would have answered itself.
	OutcomeObserved = "observed"
	// OutcomeSignature: the route's signature check refused the request.
	OutcomeSignature = "signature_invalid"
	// OutcomeBusy: the body would have taken the process past
	// max_buffered.
	OutcomeBusy = "busy"
)

// Breaker is the route's breaker as the steps use it (package breaker's
// *Breaker; a nil one admits everything).
type Breaker interface {
	Admit() (probe bool, wait time.Duration)
	Cancel(probe bool)
	Done(probe, failed bool)
}

// Admission is the route's breaker's word on one request: whether it
// holds the probe, and how long the breaker refuses new executions.
type Admission struct {
	Breaker Breaker // nil: the route has no breaker
	Probe   bool
	Refused time.Duration // 0: the breaker does not refuse
}

// Admit asks the breaker.
func (a *Admission) Admit() {
	if a.Breaker != nil {
		a.Probe, a.Refused = a.Breaker.Admit()
	}
}

// Cancel gives back the probe of a request that does not execute.
func (a *Admission) Cancel() {
	if a.Breaker != nil {
		a.Breaker.Cancel(a.Probe)
	}
}

// Readmit asks the breaker again for a request that waited for the
// first request with its key and may now go on to execute: the breaker
// may have opened while it waited. It reports whether the breaker
// refuses it (Refused says for how long). A request that holds the
// probe keeps it.
func (a *Admission) Readmit() bool {
	if a.Breaker == nil || a.Probe {
		return false
	}
	a.Probe, a.Refused = a.Breaker.Admit()
	return a.Refused > 0
}

// giveBackProbe returns the probe of a request that turned out not to
// execute yet (it waits on).
func (a *Admission) giveBackProbe() {
	a.Cancel()
	a.Probe = false
}

// ErrBreakerOpen is a waiting duplicate's claim refused by the route's
// breaker (see Admission.Readmit).
var ErrBreakerOpen = errors.New("the route's breaker refuses new executions")
