package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrNotFound is returned by the operator calls for a record that does not
// exist (never created, or expired).
var ErrNotFound = errors.New("store: record not found")

// ErrConflict is returned (wrapped, with details) by the operator calls when
// the record's state does not allow the operation, e.g. a live in-flight
// claim.
var ErrConflict = errors.New("store: record is in a state that does not allow this")

// ErrCheckRunning is returned (wrapped, with details) by the operator
// calls while a verification check holds the record (a live check lease,
// see BeginCheck): the operator acts once the check has ended. It is an
// ErrConflict.
var ErrCheckRunning = fmt.Errorf("%w: a verification check holds it", ErrConflict)

// ErrInvalidArgument is returned (wrapped, with details) for arguments the
// store refuses before acting: an unknown list state, a malformed
// list cursor, an operator result whose status is not an HTTP status.
var ErrInvalidArgument = errors.New("store: invalid argument")

// Audit limits. A record keeps its last MaxAuditEntries operator actions;
// an Action's Actor and Reason longer than these are refused
// (ErrInvalidArgument), as are control characters in the Actor.
const (
	MaxAuditEntries = 50
	MaxActorLen     = 256
	MaxReasonLen    = 2000
)

// MaxExternalID is the longest external id (bytes) a record keeps, from
// an upstream's answer, a verification check or an operator.
const MaxExternalID = 255

// Audit actions.
const (
	AuditRelease  = "release"
	AuditComplete = "complete"
	// AuditVerify: an operator ran a verification check (see EndCheck).
	AuditVerify = "verify"
)

// Validate checks an action before any engine keeps it: an actor is
// required, both texts are UTF-8, the actor is at most MaxActorLen bytes
// without control characters, the reason at most MaxReasonLen bytes.
// Errors wrap ErrInvalidArgument.
func (act Action) Validate() error {
	if act.Actor == "" {
		return fmt.Errorf("%w: the action names no actor", ErrInvalidArgument)
	}
	if len(act.Actor) > MaxActorLen || strings.ContainsFunc(act.Actor, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: the actor is longer than %d bytes or has control characters", ErrInvalidArgument, MaxActorLen)
	}
	if len(act.Reason) > MaxReasonLen {
		return fmt.Errorf("%w: the reason is longer than %d bytes", ErrInvalidArgument, MaxReasonLen)
	}
	if !utf8.ValidString(act.Actor) || !utf8.ValidString(act.Reason) {
		return fmt.Errorf("%w: the actor and the reason must be UTF-8 text", ErrInvalidArgument)
	}
	return nil
}

// ConflictOf is the error of an operator call that rec's state refuses,
// as every engine words it: ErrCheckRunning while a verification check
// holds the record (a held record is refused for no other reason), else
// ErrConflict naming the live in-flight lease or the state.
func ConflictOf(rec *Record) error {
	switch rec.State {
	case StateUnknown:
		return fmt.Errorf("%w: %s, its check lease runs until %s; act once the check has ended",
			ErrCheckRunning, rec.ID, rec.CheckLeaseUntil.UTC().Format(time.RFC3339Nano))
	case StateInFlight:
		return fmt.Errorf("%w: %s is in flight, its lease runs until %s",
			ErrConflict, rec.ID, rec.LeaseUntil.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Errorf("%w: %s is already %s", ErrConflict, rec.ID, rec.State)
}

// ValidExternalID reports whether id may be kept as a record's external
// id, wherever it comes from (an upstream's answer, a verification check,
// an operator): at most MaxExternalID bytes, no control characters.
func ValidExternalID(id string) bool {
	return len(id) <= MaxExternalID && !strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// CheckRunning reports whether a verification check holds the record at
// now (a live check lease on a held record): operators act once it ends.
func (r *Record) CheckRunning(now time.Time) bool {
	return r.State == StateUnknown && r.CheckLeaseUntil.After(now)
}

// ValidateOperatorResult checks an operator's result as every engine's
// OperatorComplete does: an HTTP status (100 to 599) and an external id
// that ValidExternalID accepts. Errors wrap ErrInvalidArgument.
func ValidateOperatorResult(res Result) error {
	switch {
	case res.Status < 100 || res.Status > 599:
		return fmt.Errorf("%w: status %d is not an HTTP status (100-599)", ErrInvalidArgument, res.Status)
	case !ValidExternalID(res.ExternalID):
		return fmt.Errorf("%w: the external id is longer than %d bytes or holds control characters", ErrInvalidArgument, MaxExternalID)
	}
	return nil
}

// OperatorCompletion checks an operator's result and lifetime as every
// engine's OperatorComplete does (see ValidateOperatorResult; a negative
// ttl is ErrInvalidArgument) and applies the defaults: DefaultTTL for 0,
// and the body's digest when none is given and the body is kept.
func OperatorCompletion(res Result, ttl time.Duration) (Result, time.Duration, error) {
	ttl = orDefault(ttl, DefaultTTL)
	if ttl < 0 {
		return res, 0, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	if err := ValidateOperatorResult(res); err != nil {
		return res, 0, err
	}
	if res.Digest == "" && !res.BodyOmitted {
		sum := sha256.Sum256(res.Body)
		res.Digest = hex.EncodeToString(sum[:])
	}
	return res, ttl, nil
}
