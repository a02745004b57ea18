package store

import (
	"errors"
	"fmt"
)

// The errors a caller tells apart with errors.Is: an engine's error wraps
// one of these (with details) whenever what went wrong is not a failure
// of the store itself. The operator service maps them to HTTP statuses
// (operator.Status): ErrInvalidID and ErrInvalidArgument 400, ErrNotFound
// 404, ErrConflict 409.

// ErrInvalidID is returned for a record id that ValidID refuses (also a
// twin digest that is no record id).
var ErrInvalidID = errors.New("store: invalid record id")

// ErrInvalidArgument is returned (wrapped, with details) for arguments the
// store refuses before acting: a claim without a token, a negative lease
// or lifetime, an unknown policy, a malformed check, an unknown list state
// or a malformed list cursor, an operator's action or result it does not
// accept.
var ErrInvalidArgument = errors.New("store: invalid argument")

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

// ErrNoRoom is wrapped by an engine's error for a write it refused for
// want of room: a full disk under the embedded store, a Redis at its
// maxmemory under noeviction. Nothing was written, and the same write
// succeeds once the store has room again.
var ErrNoRoom = errors.New("store: no room for writes")

// ErrReplicasShort: an engine told to wait for replicas strictly (the
// Redis engine's WaitStrict) found that fewer replicas than asked for
// acknowledged a claim in time; the claim was released and must not be
// used (nothing may be forwarded on it).
var ErrReplicasShort = errors.New("store: fewer replicas than wait_replicas acknowledged the claim in time (wait_strict); it was released")
