package store

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// An operator's release and completion of a record, on the operator's
// word (see Engine.OperatorRelease), with the audit entry that says who
// and why.

// Action is who resolved a record by hand and why: it is kept on the
// record as an AuditEntry and logged.
type Action struct {
	// Actor is who acted: the authenticated user of the console
	// ({http.auth.user.id}), or "admin-api" for the admin endpoint.
	Actor string
	// Reason is the operator's own words, required by the console.
	Reason string
}

// ReasonOperator is the reason of a record an operator released or
// completed.
const ReasonOperator = "operator"

// Audit actions.
const (
	AuditRelease  = "release"
	AuditComplete = "complete"
	// AuditVerify: an operator ran a verification check (see EndCheck).
	AuditVerify = "verify"
)

// Audit limits. A record keeps its last MaxAuditEntries operator actions;
// an Action's Actor and Reason longer than these are refused
// (ErrInvalidArgument), as are control characters in the Actor.
const (
	MaxAuditEntries = 50
	MaxActorLen     = 256
	MaxReasonLen    = 2000
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

// AddAudit appends an audit entry at now, keeping the newest
// MaxAuditEntries.
func (s *Stored) AddAudit(now int64, actor, action, reason string) {
	s.Audit = append(s.Audit, AuditEntry{At: time.UnixMilli(now), Actor: actor, Action: action, Reason: reason})
	if n := len(s.Audit) - MaxAuditEntries; n > 0 {
		s.Audit = s.Audit[n:] // the newest are kept, as on Redis
	}
}

// CheckOperator validates an operator's change of record id by act.
func CheckOperator(id string, act Action) error {
	if !ValidID(id) {
		return ErrInvalidID
	}
	return act.Validate()
}

// Checking reports whether a verification check holds the record (a live
// check lease): operators wait for its verdict.
func (s *Stored) Checking(now int64) bool { return s.CheckRunning(time.UnixMilli(now)) }

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

// The release on an operator's word.

// CheckOperatorRelease validates an OperatorRelease's TTL.
func CheckOperatorRelease(ttl time.Duration) (time.Duration, error) {
	ttl = cmp.Or(ttl, DefaultTTL)
	if ttl < 0 {
		return 0, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	return ttl, nil
}

// OperatorRelease is the record released on an operator's word (see
// Engine.OperatorRelease), or the conflict; the engine adds the audit
// entry.
func (s *Stored) OperatorRelease(now int64, ttl time.Duration) (*Stored, error) {
	if s.State == StateInFlight && MillisOf(s.LeaseUntil) > now || s.Checking(now) {
		return nil, ConflictOf(&s.Record)
	}
	r := s.Clone()
	r.ClearResult()
	r.State, r.Token, r.Reason = StateReleased, NewToken(), ReasonOperator
	r.NotDone, r.Unknowns = 0, 0 // a fresh retry budget
	r.ExpireAt = now + Millis(ttl)
	return r, nil
}

// The completion on an operator's word.

// MaxExternalID is the longest external id (bytes) a record keeps, from
// an upstream's answer, a verification check or an operator.
const MaxExternalID = 255

// ValidExternalID reports whether id may be kept as a record's external
// id, wherever it comes from (an upstream's answer, a verification check,
// an operator): at most MaxExternalID bytes, no control characters.
func ValidExternalID(id string) bool {
	return len(id) <= MaxExternalID && !strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f })
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
	ttl = cmp.Or(ttl, DefaultTTL)
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

// OperatorComplete is the record completed with res (already KeptResult)
// on an operator's word (see Engine.OperatorComplete), or the conflict;
// the engine adds the audit entry.
func (s *Stored) OperatorComplete(now int64, res Result, ttl time.Duration) (*Stored, error) {
	if s.State == StateCompleted || s.State == StateInFlight && MillisOf(s.LeaseUntil) > now || s.Checking(now) {
		return nil, ConflictOf(&s.Record)
	}
	r := s.Clone()
	r.Token, r.Reason = NewToken(), ReasonOperator
	r.completed(now, res, now+Millis(ttl))
	return r, nil
}
