package store

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// The arguments every transition takes, as every engine reads them: record
// ids, claim tokens, and durations in whole milliseconds with their
// defaults.

// ValidID reports whether id is a record id every engine accepts: 1 to 128
// bytes of [0-9A-Za-z_-] (ids are hex digests; braces would break the
// Cluster hash tag).
func ValidID(id string) bool {
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

// NewToken returns a random 128-bit claim token (32 hex characters).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// Defaults applied (cmp.Or) when a duration argument is zero.
const (
	// DefaultOpTimeout bounds every store call when the engine's options
	// set no bound.
	DefaultOpTimeout = 2 * time.Second
	DefaultLease     = 30 * time.Second
	DefaultTTL       = 24 * time.Hour
	DefaultHoldTTL   = 720 * time.Hour
)

// Millis is d in whole milliseconds, rounded up, as every engine stores
// durations: a positive duration never becomes 0.
func Millis(d time.Duration) int64 {
	m := d.Milliseconds()
	if time.Duration(m)*time.Millisecond < d {
		m++
	}
	return m
}
