package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The helpers below let every engine apply the contract's argument rules
// and encodings alike, so the conformance suite sees one behaviour.

// Defaults applied when a duration argument is zero.
const (
	// DefaultOpTimeout bounds every store call when the engine's options
	// set no bound.
	DefaultOpTimeout = 2 * time.Second
	DefaultLease     = 30 * time.Second
	DefaultTTL       = 24 * time.Hour
	DefaultHoldTTL   = 720 * time.Hour
)

// ErrReplicasShort: an engine told to wait for replicas strictly (the
// Redis engine's WaitStrict) found that fewer replicas than asked for
// acknowledged a claim in time; the claim was released and must not be
// used (nothing may be forwarded on it).
var ErrReplicasShort = errors.New("store: fewer replicas than wait_replicas acknowledged the claim in time (wait_strict); it was released")

// ErrNoRoom is wrapped by an engine's error for a write it refused for
// want of room: a full disk under the embedded store, a Redis at its
// maxmemory under noeviction. Nothing was written, and the same write
// succeeds once the store has room again.
var ErrNoRoom = errors.New("store: no room for writes")

// ValidID reports whether id is a record id every engine accepts: 1 to 128
// bytes of [0-9A-Za-z_-].
func ValidID(id string) bool { return validID(id) }

// Expired is what a claim does with an in-flight record whose lease ran
// out: its gateway died mid-call, so whether the call took effect is
// unknown (ClaimRequest.OnExpired).
type Expired string

const (
	// ExpiredHold holds the record as outcome_unknown with reason
	// lease_expired, for an operator or a check (the default).
	ExpiredHold Expired = "hold"
	// ExpiredRelease lets this claim take the record over and execute:
	// for upstreams that honour the forwarded key.
	ExpiredRelease Expired = "release"
)

// ClaimArgs are a ClaimRequest's lease, hold TTL and on-expired policy with
// the defaults applied.
type ClaimArgs struct {
	Lease, HoldTTL time.Duration
	OnExpired      Expired     // ExpiredHold or ExpiredRelease
	AfterExpiry    AfterExpiry // AfterExpiryExecute or AfterExpiryReject
	OnTwin         TwinAction  // TwinWarn, TwinHold or TwinReject
	// Tombstones: the claim looks for a tombstone when it finds no
	// record (its route keeps tombstones, or rejects after expiry).
	Tombstones bool
}

// ValidateClaim validates a claim request as Claim does (ErrInvalidID, also
// for a twin digest that is no record id, a missing token, negative
// durations, an unknown OnExpired, AfterExpiry or OnTwin, a tool call
// without a name or too large) and applies the
// defaults.
func ValidateClaim(req ClaimRequest) (ClaimArgs, error) {
	if !validID(req.ID) {
		return ClaimArgs{}, ErrInvalidID
	}
	if req.Token == "" {
		return ClaimArgs{}, fmt.Errorf("%w: claim without a token", ErrInvalidArgument)
	}
	if err := req.Check.Validate(); err != nil {
		return ClaimArgs{}, err
	}
	if err := validToolCall(req.Call); err != nil {
		return ClaimArgs{}, err
	}
	a := ClaimArgs{Lease: orDefault(req.Lease, DefaultLease), HoldTTL: orDefault(req.HoldTTL, DefaultHoldTTL)}
	if a.Lease < 0 || a.HoldTTL < 0 || req.MaxExecutions < 0 {
		return ClaimArgs{}, fmt.Errorf("%w: negative lease, hold TTL or budget", ErrInvalidArgument)
	}
	switch req.OnExpired {
	case "", ExpiredHold:
		a.OnExpired = ExpiredHold
	case ExpiredRelease:
		a.OnExpired = ExpiredRelease
	default:
		return ClaimArgs{}, fmt.Errorf("%w: OnExpired %q is not hold or release", ErrInvalidArgument, req.OnExpired)
	}
	if err := validateRetention(req, &a); err != nil {
		return ClaimArgs{}, err
	}
	return a, nil
}

// Millis is d in whole milliseconds, rounded up, as every engine stores
// durations: a positive duration never becomes 0.
func Millis(d time.Duration) int64 { return msCeil(d) }

// OrDefault returns def when d is 0.
func OrDefault(d, def time.Duration) time.Duration { return orDefault(d, def) }

// EncodeHeader writes h in the stored wire format ("Name: value\r\n" per
// value, names sorted; names that cannot appear on the wire are skipped,
// CR and LF in values become spaces).
func EncodeHeader(h http.Header) string { return encodeHeader(h) }

// DecodeHeader is the inverse of EncodeHeader; nil for "".
func DecodeHeader(s string) http.Header {
	if s == "" {
		return nil
	}
	return decodeHeader(s)
}

// StoredState is the short form of a state as kept in indexes and cursors
// ("in_flight", "completed", "unknown", "released"); "" for an unknown
// state. It accepts "unknown" for StateUnknown.
func StoredState(st State) string { return storedState(st) }

// IndexStates are the four record states in listing order.
func IndexStates() []State { return indexStates[:] }

// ErrInvalidID is returned for a record id that is empty, longer than 128
// bytes or not made of [0-9A-Za-z_-] (ids are hex digests; braces would break
// the Cluster hash tag).
var ErrInvalidID = errors.New("store: invalid record id")

// NewToken returns a random 128-bit claim token (32 hex characters).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// msCeil is d in whole milliseconds, rounded up.
func msCeil(d time.Duration) int64 {
	m := d.Milliseconds()
	if time.Duration(m)*time.Millisecond < d {
		m++
	}
	return m
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// ValidVerdict reports whether v is one of the Verdict constants.
func ValidVerdict(v string) bool { return validVerdict(v) }
