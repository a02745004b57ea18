package store

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The helpers below let every engine apply the contract's argument rules
// and encodings exactly as the Redis engine does, so the conformance suite
// sees one behaviour.

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
	OnExpired      Expired // ExpiredHold or ExpiredRelease
}

// CheckClaim validates a claim request as Claim does (ErrInvalidID, a
// missing token, negative durations, an unknown OnExpired) and applies
// the defaults.
func CheckClaim(req ClaimRequest) (ClaimArgs, error) {
	if !validID(req.ID) {
		return ClaimArgs{}, ErrInvalidID
	}
	if req.Token == "" {
		return ClaimArgs{}, errors.New("store: claim without a token")
	}
	if err := req.Check.Validate(); err != nil {
		return ClaimArgs{}, err
	}
	a := ClaimArgs{Lease: orDefault(req.Lease, DefaultLease), HoldTTL: orDefault(req.HoldTTL, DefaultHoldTTL)}
	if a.Lease < 0 || a.HoldTTL < 0 {
		return ClaimArgs{}, errors.New("store: negative lease or hold TTL")
	}
	switch req.OnExpired {
	case "", ExpiredHold:
		a.OnExpired = ExpiredHold
	case ExpiredRelease:
		a.OnExpired = ExpiredRelease
	default:
		return ClaimArgs{}, fmt.Errorf("store: OnExpired %q is not hold or release", req.OnExpired)
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
