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

// checkRetention checks the tombstone and twin arguments a claim and a
// completion share: a twin digest that is a record id (ErrInvalidID), no
// negative tombstone or twin window (ErrInvalidArgument).
func checkRetention(twin string, tombstone, window time.Duration) error {
	if twin != "" && !ValidID(twin) {
		return fmt.Errorf("%w: the twin digest", ErrInvalidID)
	}
	if tombstone < 0 || window < 0 {
		return fmt.Errorf("%w: negative tombstone or twin window", ErrInvalidArgument)
	}
	return nil
}
