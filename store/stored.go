package store

import (
	"slices"
	"time"
)

// Stored is a record as an engine that runs the rules in Go keeps it
// (the embedded and the Postgres engine; Redis runs them in Lua): the
// contract's Record plus its expiry and verification state. Its methods
// are the per-record rules both engines share, as pure functions of the
// record as it is, the clock (now, in ms) and the request: a change
// returns the next record, a clone, and leaves its receiver alone; the
// engine keeps only the storage (reading, fencing and writing). Each
// transition's method is in the transition's file (Claim in claim.go,
// Complete in complete.go, Release in release.go, MarkUnknown in
// hold.go, EndCheck in verification.go, ...); this file holds what they
// all use.
type Stored struct {
	Record
	ExpireAt int64 // ms; the record is gone from then on

	// CheckToken is the running check's token (the check lease until
	// CheckLeaseUntil); NotFoundAt is when the last counted "not
	// applied" answer came (ms, 0: none).
	CheckToken string
	NotFoundAt int64
}

// Clone is a copy of s that shares no appendable list with it.
func (s *Stored) Clone() *Stored {
	c := *s
	c.Audit = slices.Clip(c.Audit)
	c.Checks = slices.Clip(c.Checks)
	c.Answers = slices.Clip(c.Answers)
	return &c
}

// View is the record for a caller.
func (s *Stored) View() *Record {
	v := s.Record
	return &v
}

// ClearResult drops the result fields, as a release or a takeover does.
func (s *Stored) ClearResult() {
	s.CompletedAt = time.Time{}
	s.Status = 0
	s.Header = nil
	s.Body = nil
	s.BodyOmitted = false
	s.Digest = ""
	s.ExternalID = ""
	s.Reason = ""
}

// MillisOf is t in milliseconds since the epoch, 0 for the zero time:
// how the Go engines keep times.
func MillisOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// TimeOfMillis is the inverse of MillisOf.
func TimeOfMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
