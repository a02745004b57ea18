package store

import (
	"cmp"
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
// the same fenced path (Redrive, in redrive.go), from the request the
// record kept (encrypted by the gateway; the store keeps it as opaque
// bytes), where the operation is known not to have taken effect.

// Why a record was released (Record.Reason of a released record; see
// also ReasonOperator and ReasonVerifiedNotApplied).
const (
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
	if !ValidID(req.ID) {
		return req, ErrInvalidID
	}
	req.TTL, req.HoldTTL = cmp.Or(req.TTL, DefaultTTL), cmp.Or(req.HoldTTL, DefaultHoldTTL)
	if req.TTL < 0 || req.HoldTTL < 0 || req.MaxExecutions < 0 {
		return req, fmt.Errorf("%w: negative TTL, hold TTL or budget", ErrInvalidArgument)
	}
	return req, nil
}

// AnswerNotDone is the record after a "not done" execution under its claim
// (req from CheckNotDone): released, or held as retries exhausted once
// the budget is used up. Nil and NotDoneLost when the claim is gone.
func (s *Stored) AnswerNotDone(now int64, req NotDoneRequest) (*Stored, NotDoneOutcome) {
	if s == nil || s.Token != req.Token {
		return nil, NotDoneLost
	}
	r := s.Clone()
	r.ClearResult()
	r.NotDone++
	if req.Unknown {
		r.Unknowns++
	}
	r.Answers = append(r.Answers, Answer{At: time.UnixMilli(now), Status: req.Status})
	if n := len(r.Answers) - MaxAnswers; n > 0 {
		r.Answers = r.Answers[n:]
	}
	if req.MaxExecutions > 0 && r.NotDone >= req.MaxExecutions {
		r.State, r.Reason = StateUnknown, ReasonRetriesExhausted
		r.NextCheck = time.Time{} // known not done: nothing to check
		r.ExpireAt = now + Millis(req.HoldTTL)
		return r, NotDoneExhausted
	}
	r.State, r.Reason = StateReleased, req.ReleasedReason()
	r.ExpireAt = now + Millis(req.TTL)
	return r, NotDoneReleased
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
