package store

import (
	"fmt"
	"time"
)

// Retention past a record's life: a completed record can leave a small
// tombstone that outlives it (CompleteRequest.Tombstone), so a retry that
// arrives after the record expired is told apart from a first delivery
// (ClaimRequest.AfterExpiry); and a completion can leave a twin entry under
// a digest of its route, scope and payload (CompleteRequest.Twin), so a
// new key carrying an operation completed shortly before under another key
// is flagged (ClaimRequest.OnTwin). Both are written in the completion's
// own atomic step, read in the claim's own step, and expire by themselves.

// AfterExpiry is what a claim does when it finds no record but a live
// tombstone of its id (ClaimRequest.AfterExpiry).
type AfterExpiry string

const (
	// AfterExpiryExecute claims as when there were no tombstone (the
	// default, also for ""); the result reports the tombstone.
	AfterExpiryExecute AfterExpiry = "execute"
	// AfterExpiryReject creates nothing and does not claim; the result
	// reports the tombstone.
	AfterExpiryReject AfterExpiry = "reject"
)

// TwinAction is what a claim of a new key does when a live twin entry
// names another record (ClaimRequest.OnTwin).
type TwinAction string

const (
	// TwinWarn claims as usual and reports the twin (the default, also
	// for "").
	TwinWarn TwinAction = "warn"
	// TwinHold creates the record held as outcome unknown with reason
	// ReasonSamePayload (lifetime HoldTTL), not claimed, for an operator
	// to release or complete.
	TwinHold TwinAction = "hold"
	// TwinReject creates nothing and does not claim.
	TwinReject TwinAction = "reject"
)

// ReasonSamePayload is the reason of a record held by TwinHold: its
// payload equals that of an operation completed under another key within
// the twin window. Nothing was forwarded (Executions 0), and it carries no
// check: an operator releases it (the next retry executes) or completes
// it.
const ReasonSamePayload = "same_payload"

// DefaultTombstone is how long the tombstone of a record completed by an
// operator (OperatorComplete) outlives the record: operators act without
// a route's settings at hand, so every engine uses this one.
const DefaultTombstone = 30 * 24 * time.Hour

// Tombstone is what remains of a completed record once it expired, for
// as long as its CompleteRequest.Tombstone said: no body, no header.
type Tombstone struct {
	// ID is the record id.
	ID string
	// CompletedAt is when the record was completed (the store's clock).
	CompletedAt time.Time
	// Status is the stored result's HTTP status.
	Status int
	// Reason is the completed record's reason: "" for an upstream's
	// answer, ReasonVerified for a check's, ReasonOperator for an
	// operator's.
	Reason string
}

// Twin is the record that a live twin entry names: an operation with the
// same route, scope and payload completed under another key.
type Twin struct {
	ID          string
	CompletedAt time.Time
}

// OnTombstone is what a tombstone found makes the claim do: AfterExpiry,
// or "" when the claim looks for none (see ClaimArgs.Tombstones).
func (a ClaimArgs) OnTombstone() AfterExpiry {
	if !a.Tombstones {
		return ""
	}
	return a.AfterExpiry
}

// Fresh is what a claim that finds no live record does, given what it
// found of the id's past (a tombstone) and of the payload's (a twin).
type Fresh int

const (
	// FreshCreate: create the record in flight and claim it.
	FreshCreate Fresh = iota
	// FreshHold: create the record held with ReasonSamePayload.
	FreshHold
	// FreshReject: create nothing.
	FreshReject
)

// Fresh decides a claim of an absent record from the live tombstone of
// its id and the live twin entry of its twin digest (nil: none; a twin
// naming the claim's own id is no twin: the caller drops it).
func (a ClaimArgs) Fresh(tomb *Tombstone, twin *Twin) Fresh {
	switch {
	case tomb != nil && a.AfterExpiry == AfterExpiryReject:
		return FreshReject
	case twin != nil && a.OnTwin == TwinReject:
		return FreshReject
	case twin != nil && a.OnTwin == TwinHold:
		return FreshHold
	}
	return FreshCreate
}

// HeldSamePayload is the record a claim held by TwinHold creates: what
// req asked for, held as outcome unknown with ReasonSamePayload since now,
// never executed, with no lease and no check (nothing to look up: it was
// not forwarded); it keeps the sealed request.
func HeldSamePayload(req ClaimRequest, now time.Time) Record {
	r := NewRecord(req, now, 0)
	r.State, r.Reason = StateUnknown, ReasonSamePayload
	r.LeaseUntil, r.Executions, r.Check = time.Time{}, 0, Check{}
	return r
}

// validateRetention checks a claim's tombstone and twin arguments and
// fills them in a.
func validateRetention(req ClaimRequest, a *ClaimArgs) error {
	if req.Twin != "" && !validID(req.Twin) {
		return fmt.Errorf("%w: the twin digest", ErrInvalidID)
	}
	if req.Tombstone < 0 || req.TwinWindow < 0 {
		return fmt.Errorf("%w: negative tombstone or twin window", ErrInvalidArgument)
	}
	switch req.AfterExpiry {
	case "", AfterExpiryExecute:
		a.AfterExpiry = AfterExpiryExecute
	case AfterExpiryReject:
		a.AfterExpiry = AfterExpiryReject
	default:
		return fmt.Errorf("%w: AfterExpiry %q is not execute or reject", ErrInvalidArgument, req.AfterExpiry)
	}
	switch req.OnTwin {
	case "", TwinWarn:
		a.OnTwin = TwinWarn
	case TwinHold, TwinReject:
		a.OnTwin = req.OnTwin
	default:
		return fmt.Errorf("%w: OnTwin %q is not warn, hold or reject", ErrInvalidArgument, req.OnTwin)
	}
	a.Tombstones = req.Tombstone > 0 || a.AfterExpiry == AfterExpiryReject
	return nil
}

// checkCompletionRetention checks a completion's tombstone and twin
// arguments.
func checkCompletionRetention(req CompleteRequest) error {
	if req.Twin != "" && !validID(req.Twin) {
		return fmt.Errorf("%w: the twin digest", ErrInvalidID)
	}
	if req.Tombstone < 0 || req.TwinWindow < 0 {
		return fmt.Errorf("%w: negative tombstone or twin window", ErrInvalidArgument)
	}
	return nil
}

// TwinEntry is the twin entry a completion writes, or none: its digest
// and how long it lives (both set, else no entry).
func (req CompleteRequest) TwinEntry() (string, time.Duration) {
	if req.Twin == "" || req.TwinWindow <= 0 {
		return "", 0
	}
	return req.Twin, req.TwinWindow
}
