package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotFound is returned by the operator calls for a record that does not
// exist (never created, or expired).
var ErrNotFound = errors.New("store: record not found")

// ErrConflict is returned (wrapped, with details) by the operator calls when
// the record's state does not allow the operation, e.g. a live in-flight
// claim.
var ErrConflict = errors.New("store: record is in a state that does not allow this")

// ErrInvalidArgument is returned (wrapped, with details) for arguments the
// store refuses before reaching Redis: an unknown list state, a malformed
// list cursor, an operator result whose status is not an HTTP status.
var ErrInvalidArgument = errors.New("store: invalid argument")

// OperatorRelease releases a record on an operator's word that its
// operation did not take effect (or must run again): the next retry with
// the same payload executes. Allowed from outcome_unknown, completed,
// released, and in_flight whose lease ran out; a live in-flight claim gives
// ErrConflict, a missing record ErrNotFound. Result fields are dropped,
// attempts and executions kept, Reason becomes "operator", and the record
// gets a new random token, so a late finisher of the old claim can no longer
// complete, release or hold it. ttl is the key's lifetime afterwards
// (default 24h). One script, atomic against a Claim arriving at the same
// moment. The record is returned as the script left it; with ErrConflict it
// is the current record (unchanged).
func (s *Store) OperatorRelease(ctx context.Context, id string, ttl time.Duration) (*Record, error) {
	ttl = orDefault(ttl, DefaultTTL)
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	return s.operator(ctx, "release", operatorReleaseScript, id, NewToken(), ms(ttl))
}

// OperatorComplete records a verified outcome of a record's operation, which
// later retries replay: allowed from outcome_unknown, released, and in_flight
// whose lease ran out; completed or a live in-flight claim give ErrConflict,
// a missing record ErrNotFound. The record becomes completed with res
// (CompletedAt = now on the Redis clock, Reason "operator") under a new
// random token, so a late finisher of the old claim can no longer overwrite
// it; attempts and executions are kept. When res.Digest is empty and the
// body is not omitted, the digest of res.Body is stored. ttl is the key's
// lifetime afterwards (default 24h). One script, atomic against a Claim
// arriving at the same moment. The record is returned as the script left it
// (with the body); with ErrConflict it is the current record (unchanged).
func (s *Store) OperatorComplete(ctx context.Context, id string, res Result, ttl time.Duration) (*Record, error) {
	ttl = orDefault(ttl, DefaultTTL)
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	if res.Status < 100 || res.Status > 599 {
		return nil, fmt.Errorf("%w: status %d is not an HTTP status (100-599)", ErrInvalidArgument, res.Status)
	}
	if res.Digest == "" && !res.BodyOmitted {
		sum := sha256.Sum256(res.Body)
		res.Digest = hex.EncodeToString(sum[:])
	}
	omitted := "0"
	if res.BodyOmitted {
		omitted = "1"
	}
	return s.operator(ctx, "complete", operatorCompleteScript, id, NewToken(),
		strconv.Itoa(res.Status), encodeHeader(res.Header), res.Body, omitted,
		res.Digest, res.ExternalID, ms(ttl))
}

// operator runs an operator script (reply: code + record) and maps its code
// to the record or ErrNotFound / ErrConflict.
func (s *Store) operator(ctx context.Context, op string, sc *redis.Script, id string, args ...any) (*Record, error) {
	if !validID(id) {
		return nil, ErrInvalidID
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	v, err := sc.Run(ctx, s.client, s.recordKeys(id), append([]any{id}, args...)...).Slice()
	if err != nil {
		return nil, fmt.Errorf("store: operator %s %s: %w", op, id, err)
	}
	if len(v) != 1+numFields {
		return nil, errShortReply
	}
	code, _ := v[0].(int64)
	rec, err := decodeRecord(id, v[1:])
	if err != nil {
		return nil, err
	}
	switch {
	case code == codeNotFound || rec == nil:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case code == codeConflict:
		if rec.State == StateInFlight {
			return rec, fmt.Errorf("%w: %s is in flight, its lease runs until %s",
				ErrConflict, id, rec.LeaseUntil.UTC().Format(time.RFC3339Nano))
		}
		return rec, fmt.Errorf("%w: %s is already %s", ErrConflict, id, rec.State)
	case code != codeDone:
		return nil, fmt.Errorf("store: operator %s %s: unexpected reply code %d", op, id, code)
	}
	return rec, nil
}
