package store

import (
	"context"
	"fmt"
	"time"
)

// The recovery path: a record counts the executions of its operation that
// ended "not done" (the upstream said so with a retry status or a
// redirect, or the request never left), and those whose outcome was
// unknown but on_unknown_outcome: release let go (Unknowns), and keeps
// what each answered; the execution that uses up the route's budget holds
// the record for an operator (reason ReasonRetriesExhausted) instead of
// releasing it. An operator may then run the operation once more through
// the same fenced path (Redrive), from the request the record kept
// (encrypted by the gateway; the store keeps it as opaque bytes), where
// the operation is known not to have taken effect.

// ReasonRetriesExhausted is the reason of a record held because its
// operation used up its retry budget: known not done, waiting for an
// operator.
const ReasonRetriesExhausted = "retries exhausted"

// StateExhausted is how operators see a record held for
// ReasonRetriesExhausted (see Record.Class). Engines keep it as
// StateUnknown with that reason, so it lives as long as a held record
// (hold_ttl) and is listed with the held records.
const StateExhausted State = "retries_exhausted"

// Why a record was released (Record.Reason of a released record).
const (
	// ReasonOperator: an operator released (or completed) it.
	ReasonOperator = "operator"
	// ReasonNotDone: the execution ended "not done" (a retry status, a
	// redirect, a request that never left): known not to have taken
	// effect.
	ReasonNotDone = "not_done"
	// ReasonUnknownReleased: the execution's outcome was unknown and
	// on_unknown_outcome: release let it go: the upstream may have acted.
	ReasonUnknownReleased = "unknown_released"
	// ReasonRefused: the upstream refused the request as it was sent
	// (RefusedAsSent: 401, 403, 404, 405, 413, 415, 431): known not done,
	// and free for a request of any payload (see Free).
	ReasonRefused = "refused"
)

// RefusedAsSent reports whether an upstream's not-done answer refused
// the request as it was sent (its credentials or signature, its target,
// its method, its size, its type): unlike 408, 425, 429 or 503 ("come
// back later"), it does not ask for the same request again, and a request
// with another payload under its key is a new request, not a changed one.
// A forged webhook that a receiver checking signatures refused with 401
// is one; the genuine event after it must not be taken for a changed
// payload.
func RefusedAsSent(status int) bool {
	switch status {
	case 401, 403, 404, 405, 413, 415, 431:
		return true
	}
	return false
}

// MaxAnswers is how many execution answers a record keeps, the newest.
const MaxAnswers = 10

// AuditRun: an operator ran the operation again (Redrive).
const AuditRun = "run"

// Answer is what one execution that ended "not done" answered.
type Answer struct {
	At     time.Time // the store's clock when it was recorded
	Status int       // the status the client got (502 for a request that never left)
}

// Class is the record's state as operators see it: StateExhausted for a
// record held because its retries were used up, else State.
func (r *Record) Class() State {
	if r.State == StateUnknown && r.Reason == ReasonRetriesExhausted {
		return StateExhausted
	}
	return r.State
}

// NotDoneRequest records that a claim's execution ended "not done", or
// that its outcome was unknown and the route's policy lets it go
// (Unknown). Either counts against the budget.
type NotDoneRequest struct {
	ID, Token string
	// Status is what the client got, kept in the record's Answers.
	Status int
	// Unknown: the outcome is not known (the upstream may have acted);
	// on_unknown_outcome: release lets it go. It counts in Unknowns too,
	// and a record it releases has ReasonUnknownReleased (else
	// ReasonRefused for a status RefusedAsSent, else ReasonNotDone).
	Unknown bool
	// MaxExecutions is the route's budget: when this execution makes
	// that many "not done" executions, the record is held with
	// ReasonRetriesExhausted (key lifetime HoldTTL) instead of released
	// (key lifetime TTL). 0: no budget.
	MaxExecutions int64
	TTL, HoldTTL  time.Duration
}

// NotDoneOutcome is what NotDone did.
type NotDoneOutcome int

const (
	// NotDoneLost: the claim was taken over; nothing changed.
	NotDoneLost NotDoneOutcome = iota
	// NotDoneReleased: released; the next retry executes.
	NotDoneReleased
	// NotDoneExhausted: held with ReasonRetriesExhausted.
	NotDoneExhausted
)

// CheckNotDone validates a NotDoneRequest as every engine does and applies
// the defaults.
func CheckNotDone(req NotDoneRequest) (NotDoneRequest, error) {
	if !validID(req.ID) {
		return req, ErrInvalidID
	}
	req.TTL, req.HoldTTL = orDefault(req.TTL, DefaultTTL), orDefault(req.HoldTTL, DefaultHoldTTL)
	if req.TTL < 0 || req.HoldTTL < 0 || req.MaxExecutions < 0 {
		return req, fmt.Errorf("%w: negative TTL, hold TTL or budget", ErrInvalidArgument)
	}
	return req, nil
}

// NotDone records that the claim's execution ended "not done" with
// status: released, or held when it used up max "not done" executions
// (0: no budget).
func (c *Claim) NotDone(ctx context.Context, status int, max int64) (NotDoneOutcome, error) {
	return c.notDone(ctx, status, max, false)
}

// LetGo records that the claim's execution had an unknown outcome that
// the route's policy (on_unknown_outcome: release) lets go: released
// (ReasonUnknownReleased), or held once it uses up max executions, like
// NotDone.
func (c *Claim) LetGo(ctx context.Context, status int, max int64) (NotDoneOutcome, error) {
	return c.notDone(ctx, status, max, true)
}

func (c *Claim) notDone(ctx context.Context, status int, max int64, unknown bool) (NotDoneOutcome, error) {
	return c.engine.NotDone(ctx, NotDoneRequest{
		ID: c.req.ID, Token: c.req.Token, Status: status, Unknown: unknown, MaxExecutions: max,
		TTL: c.TTL, HoldTTL: c.req.HoldTTL,
	})
}

// ReleasedReason is the reason NotDone gives a record it releases.
func (req NotDoneRequest) ReleasedReason() string {
	switch {
	case req.Unknown:
		return ReasonUnknownReleased
	case RefusedAsSent(req.Status):
		return ReasonRefused
	}
	return ReasonNotDone
}

// RedriveRequest claims a record for an operator's re-drive.
type RedriveRequest struct {
	ID string
	// Token is the new claim's fencing token (NewToken).
	Token string
	// Lease and HoldTTL are the claim's, as for a ClaimRequest.
	Lease, HoldTTL time.Duration
	// Act is who runs it and why, kept on the audit trail.
	Act Action
}

// KnownNotDone reports whether rec's operation is known not to have
// taken effect, the condition of a re-drive: released by an operator
// (ReasonOperator) or by verification (ReasonVerifiedNotApplied), or
// released or held as retries exhausted after "not done" answers only
// (ReasonNotDone, ReasonRetriesExhausted, with no unknown outcome among
// the executions counted). A record that on_unknown_outcome: release let
// go, a budget used up partly by such outcomes, a record held as outcome
// unknown, and a record released before releases said why are not.
func KnownNotDone(rec *Record) bool {
	switch {
	case rec.State == StateReleased:
		switch rec.Reason {
		case ReasonOperator, ReasonVerifiedNotApplied:
			return true
		case ReasonNotDone, ReasonRefused:
			return rec.Unknowns == 0
		}
	case rec.State == StateUnknown && rec.Reason == ReasonRetriesExhausted:
		return rec.Unknowns == 0
	}
	return false
}

// Free reports whether rec was released because the upstream refused its
// request as sent (ReasonRefused) and no execution of it had an unknown
// outcome: nothing took effect and the same request will not come back,
// so a claim of any payload takes it over, as Stripe's keys save nothing
// for a request that did not begin executing. Any other released record
// is taken over only by its own payload.
func Free(rec *Record) bool {
	return rec.State == StateReleased && rec.Reason == ReasonRefused && rec.Unknowns == 0
}

// RedriveRefusal is why a record may not be re-driven at now, as every
// engine words it (nil: it may). A re-drive needs a kept request and an
// operation known not to have taken effect (KnownNotDone). Anything else
// is refused until someone verifies it, or releases it on knowing the
// operation did not take effect.
func RedriveRefusal(rec *Record, now time.Time) error {
	switch {
	case rec.CheckRunning(now):
		return ConflictOf(rec)
	case rec.State == StateInFlight && rec.LeaseUntil.After(now):
		return ConflictOf(rec)
	case rec.State == StateCompleted:
		return fmt.Errorf("%w: %s is already completed; retries replay its result", ErrConflict, rec.ID)
	case !KnownNotDone(rec):
		return fmt.Errorf("%w: %s: the upstream may have acted (%s); running it again could do it twice: verify it upstream, "+
			"then complete it with the upstream's answer, or release it once you know the operation did not take effect, then run it",
			ErrConflict, rec.ID, mayHaveActed(rec))
	case len(rec.Request) == 0:
		return fmt.Errorf("%w: %s kept no request to run (its route does not set keep_request)", ErrConflict, rec.ID)
	}
	return nil
}

// mayHaveActed says why rec's operation is not known not done.
func mayHaveActed(rec *Record) string {
	switch {
	case rec.State == StateInFlight:
		return "its call's lease ran out without a result"
	case rec.Class() == StateExhausted:
		return fmt.Sprintf("its retries were used up, %d of them by unknown outcomes that on_unknown_outcome: release let go", rec.Unknowns)
	case rec.State == StateUnknown:
		return "it is held as outcome unknown"
	case rec.Reason == ReasonUnknownReleased:
		return "it was released by on_unknown_outcome: release after an unknown outcome"
	case rec.Reason == ReasonNotDone:
		return fmt.Sprintf("%d earlier executions had unknown outcomes that on_unknown_outcome: release let go", rec.Unknowns)
	}
	return "it was released without a recorded reason"
}

// CheckRedrive validates a RedriveRequest as every engine does and applies
// the defaults.
func CheckRedrive(req RedriveRequest) (RedriveRequest, error) {
	if !validID(req.ID) {
		return req, ErrInvalidID
	}
	if req.Token == "" {
		return req, fmt.Errorf("%w: a re-drive without a token", ErrInvalidArgument)
	}
	req.Lease, req.HoldTTL = orDefault(req.Lease, DefaultLease), orDefault(req.HoldTTL, DefaultHoldTTL)
	if req.Lease < 0 || req.HoldTTL < 0 {
		return req, fmt.Errorf("%w: negative lease or hold TTL", ErrInvalidArgument)
	}
	return req, req.Act.Validate()
}

// ClaimFor is the handle of the claim that a re-drive of rec made with
// req: it records the run's outcome like any execution's.
func ClaimFor(e ClaimOps, rec *Record, req RedriveRequest, ttl time.Duration) *Claim {
	return NewClaim(e, ClaimRequest{
		ID: rec.ID, Route: rec.Route, Operation: rec.Operation,
		Fingerprint: rec.Fingerprint, FingerprintRule: rec.FingerprintRule,
		Token: req.Token, Lease: req.Lease, HoldTTL: req.HoldTTL, TTL: ttl,
	}, rec.StartedAt, ttl)
}
