package store

import (
	"cmp"
	"fmt"
	"time"
)

// The completion: the upstream's result stored under its claim (see
// CompleteRequest), with the tombstone and the twin entry it leaves.
// CheckComplete checks the request; Stored.Complete is the whole rule for an engine that runs it in Go, from the record as
// the engine read it to the record it writes.

// CompleteRequest stores the result of an upstream call under its claim.
//
// It succeeds while the record carries Token, also when it was meanwhile
// marked outcome_unknown (a late but real outcome is better than none);
// false when the token was taken over. When the record does not exist at
// all (a failover lost the claim, or it expired while the result was being
// written) it is written anew as completed from Claim, StartedAt and
// Result, with attempts and executions 1: the call ran and its result is
// known, so losing the claim must not cost a second execution.
type CompleteRequest struct {
	// Claim is the request that made the claim (ID and Token fence it).
	Claim ClaimRequest
	// StartedAt is when the claim was made (the store's clock).
	StartedAt time.Time
	// Result is what the upstream answered.
	Result Result
	// TTL is how long the completed record is replayed (default 24h).
	TTL time.Duration
	// Tombstone is how long a tombstone of the completed record outlives
	// it (0: none): the record's id, completion time, status and reason,
	// reported by a claim that finds the record gone (see
	// ClaimRequest.AfterExpiry). Written in the completion's own step.
	Tombstone time.Duration
	// Twin, with TwinWindow, writes (or refreshes) the twin entry Twin →
	// this record and its completion time, living TwinWindow, in the
	// completion's own step (see ClaimRequest.Twin). "" or a zero window:
	// none.
	Twin       string
	TwinWindow time.Duration
}

// CheckComplete validates a Complete's arguments and returns the result
// to store and its TTL. The result is the caller's, not copied: an
// engine only encodes it into its write (the stored form, see
// EncodeHeader) before its Complete returns, and keeps nothing of it.
func CheckComplete(req CompleteRequest) (Result, time.Duration, error) {
	if err := ValidateComplete(req); err != nil {
		return Result{}, 0, err
	}
	return req.Result, cmp.Or(req.TTL, DefaultTTL), nil
}

// ValidateComplete validates a Complete's arguments as every engine
// does: the record id (ErrInvalidID, also for a twin digest that is no
// record id), negative durations (ErrInvalidArgument).
func ValidateComplete(req CompleteRequest) error {
	if !ValidID(req.Claim.ID) {
		return ErrInvalidID
	}
	if req.TTL < 0 {
		return fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	return checkRetention(req.Twin, req.Tombstone, req.TwinWindow)
}

// Complete is the record a completion of req's claim leaves at now (the
// store's clock, ms): s completed with result (the caller's, as
// CheckComplete returns it: the record is only encoded, never kept),
// living ttl and keeping no request; when no record is left (s nil), one
// written anew from the claim (see CompleteRequest); nil when the token
// was taken over.
func (s *Stored) Complete(now int64, req CompleteRequest, result Result, ttl time.Duration) *Stored {
	var r *Stored
	switch {
	case s == nil:
		started := req.StartedAt
		if started.IsZero() {
			started = time.UnixMilli(now)
		}
		r = &Stored{Record: Record{
			ID:              req.Claim.ID,
			Route:           req.Claim.Route,
			Operation:       req.Claim.Operation,
			Fingerprint:     req.Claim.Fingerprint,
			FingerprintRule: req.Claim.FingerprintRule,
			Token:           req.Claim.Token,
			StartedAt:       time.UnixMilli(started.UnixMilli()),
			Attempts:        1,
			Executions:      1,
		}}
	case s.Token != req.Claim.Token:
		return nil
	default:
		r = s.Clone()
	}
	r.Reason = ""
	r.completed(now, result, now+Millis(ttl))
	return r
}

// completed makes s completed at now with res (copied by KeptResult, or
// a claim's completion's own, only encoded), living until expireAt and keeping no request: a claim's
// completion, an operator's and a check's that found the operation
// applied alike (each sets its own token and reason).
func (s *Stored) completed(now int64, res Result, expireAt int64) {
	s.State = StateCompleted
	s.CompletedAt = time.UnixMilli(now)
	s.Status = res.Status
	s.Header = res.Header
	s.Body = res.Body
	s.BodyOmitted = res.BodyOmitted
	s.Digest = res.Digest
	s.ExternalID = res.ExternalID
	s.Request = nil // a completed record keeps no request
	s.ExpireAt = expireAt
}

// TwinEntry is the twin entry a completion writes, or none: its digest
// and how long it lives (both set, else no entry).
func (req CompleteRequest) TwinEntry() (string, time.Duration) {
	if req.Twin == "" || req.TwinWindow <= 0 {
		return "", 0
	}
	return req.Twin, req.TwinWindow
}
