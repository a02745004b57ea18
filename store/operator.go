package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
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
// store refuses before reaching Redis: an unknown list state, a malformed
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

// auditEntry is the stored form of an AuditEntry: one JSON object per line
// of the record's audit field; "at" (ms, the Redis clock) is written by the
// script, in front of the fields encoded here.
type auditEntry struct {
	At     int64  `json:"at"`
	Actor  string `json:"actor"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

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

// encodeAction checks act and returns the audit line without its leading
// `{"at":N,`, as the operator scripts expect it.
func encodeAction(action string, act Action) (string, error) {
	if err := act.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(auditEntry{Actor: act.Actor, Action: action, Reason: act.Reason})
	if err != nil {
		return "", err
	}
	// json.Marshal escapes line breaks inside strings, so an entry is one
	// line; drop `{"at":0,`.
	return string(b[len(`{"at":0,`):]), nil
}

// decodeAudit reads the audit field. A line that does not decode (never
// written by this package) is skipped rather than making the record
// unreadable: retries must still replay it.
func decodeAudit(s string) []AuditEntry {
	if s == "" {
		return nil
	}
	out := make([]AuditEntry, 0, strings.Count(s, "\n")+1)
	for line := range strings.SplitSeq(s, "\n") {
		var e auditEntry
		if json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
			continue
		}
		out = append(out, AuditEntry{At: time.UnixMilli(e.At), Actor: e.Actor, Action: e.Action, Reason: e.Reason})
	}
	return out
}

// OperatorRelease releases a record on an operator's word that its
// operation did not take effect (or must run again): the next retry with
// the same payload executes. Allowed from outcome_unknown, completed,
// released, and in_flight whose lease ran out; a live in-flight claim gives
// ErrConflict, a missing record ErrNotFound. Result fields are dropped,
// attempts and executions kept, Reason becomes "operator", and the record
// gets a new random token, so a late finisher of the old claim can no longer
// complete, release or hold it. ttl is the key's lifetime afterwards
// (default 24h). act is appended to the record's audit trail (the last
// MaxAuditEntries are kept) in the same step; its Actor is required. One
// script, atomic against a Claim arriving at the same moment. The record is
// returned as the script left it; with ErrConflict it is the current record
// (unchanged, no audit entry).
func (s *Store) OperatorRelease(ctx context.Context, id string, act Action, ttl time.Duration) (*Record, error) {
	ttl = orDefault(ttl, DefaultTTL)
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	entry, err := encodeAction(AuditRelease, act)
	if err != nil {
		return nil, err
	}
	return s.operator(ctx, "release", operatorReleaseScript, id, NewToken(), ms(ttl), entry)
}

// OperatorComplete records a verified outcome of a record's operation, which
// later retries replay: allowed from outcome_unknown, released, and in_flight
// whose lease ran out; completed or a live in-flight claim give ErrConflict,
// a missing record ErrNotFound. The record becomes completed with res
// (CompletedAt = now on the Redis clock, Reason "operator") under a new
// random token, so a late finisher of the old claim can no longer overwrite
// it; attempts and executions are kept. When res.Digest is empty and the
// body is not omitted, the digest of res.Body is stored. ttl is the key's
// lifetime afterwards (default 24h). act is appended to the record's audit
// trail in the same step, as for OperatorRelease. One script, atomic
// against a Claim arriving at the same moment. The record is returned as
// the script left it (with the body); with ErrConflict it is the current
// record (unchanged, no audit entry).
func (s *Store) OperatorComplete(ctx context.Context, id string, res Result, act Action, ttl time.Duration) (*Record, error) {
	ttl = orDefault(ttl, DefaultTTL)
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	if err := CheckOperatorResult(res); err != nil {
		return nil, err
	}
	if res.Digest == "" && !res.BodyOmitted {
		sum := sha256.Sum256(res.Body)
		res.Digest = hex.EncodeToString(sum[:])
	}
	entry, err := encodeAction(AuditComplete, act)
	if err != nil {
		return nil, err
	}
	omitted := "0"
	if res.BodyOmitted {
		omitted = "1"
	}
	return s.operator(ctx, "complete", operatorCompleteScript, id, NewToken(),
		strconv.Itoa(res.Status), encodeHeader(res.Header), res.Body, omitted,
		res.Digest, res.ExternalID, ms(ttl), entry)
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

// CheckOperatorResult checks an operator's result as every engine's
// OperatorComplete does: an HTTP status (100 to 599) and an external id
// that ValidExternalID accepts. Errors wrap ErrInvalidArgument.
func CheckOperatorResult(res Result) error {
	switch {
	case res.Status < 100 || res.Status > 599:
		return fmt.Errorf("%w: status %d is not an HTTP status (100-599)", ErrInvalidArgument, res.Status)
	case !ValidExternalID(res.ExternalID):
		return fmt.Errorf("%w: the external id is longer than %d bytes or holds control characters", ErrInvalidArgument, MaxExternalID)
	}
	return nil
}

// operator runs an operator script (reply: code + record) and maps its code
// to the record or ErrNotFound / ErrConflict.
func (s *Store) operator(ctx context.Context, op string, sc *redis.Script, id string, args ...any) (*Record, error) {
	if !validID(id) {
		return nil, ErrInvalidID
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	code, rec, err := s.recordReply(sc.Run(ctx, s.client, s.keys(id), append([]any{id}, args...)...), id)
	if err != nil {
		return nil, fmt.Errorf("store: operator %s %s: %w", op, id, err)
	}
	switch {
	case code == codeNotFound || rec == nil:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case code == codeConflict:
		return rec, ConflictOf(rec)
	case code != codeDone:
		return nil, fmt.Errorf("store: operator %s %s: unexpected reply code %d", op, id, code)
	}
	return rec, nil
}
