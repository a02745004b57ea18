package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// Stored is a record as an engine that runs the rules in Go keeps it
// (the embedded and the Postgres engine; Redis runs them in Lua): the
// contract's Record plus its expiry and verification state. Its methods
// are the per-record rules both engines share, as pure functions of the
// record as it is, the clock (now, in ms) and the request: a change
// returns the next record, a clone, and leaves its receiver alone; the
// engine keeps only the storage (reading, fencing and writing).
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

// SetResult stores res (already copied by KeptResult).
func (s *Stored) SetResult(res Result) {
	s.Status = res.Status
	s.Header = res.Header
	s.Body = res.Body
	s.BodyOmitted = res.BodyOmitted
	s.Digest = res.Digest
	s.ExternalID = res.ExternalID
}

// KeptResult copies a result out of the caller's buffers, with its header
// in the stored form every engine keeps.
func KeptResult(res Result) Result {
	res.Header = DecodeHeader(EncodeHeader(res.Header))
	if len(res.Body) == 0 {
		res.Body = nil
	} else {
		res.Body = slices.Clone(res.Body)
	}
	return res
}

// KeptCheck is a claim's check as a record keeps it.
func KeptCheck(c Check) Check {
	c = c.Normalized()
	c.Match = slices.Clone(c.Match) // not the caller's
	return c
}

// KeptRequest copies a claim's sealed request out of the caller's buffer.
func KeptRequest(req []byte) []byte {
	if len(req) == 0 {
		return nil
	}
	return slices.Clone(req)
}

// ScheduleFirstCheck makes a record that was just held due for its first
// scheduled check its After from now.
func (s *Stored) ScheduleFirstCheck(now int64) {
	if !s.Check.IsZero() {
		s.NextCheck = time.UnixMilli(now + Millis(s.Check.After))
	}
}

// NewClaimChecks starts a new claim's checks: its own check, no count,
// streak, schedule or lease; the log of earlier checks stays.
func (s *Stored) NewClaimChecks(c Check) {
	s.Check = c
	s.CheckCount, s.NotFoundStreak, s.NotFoundAt = 0, 0, 0
	s.NextCheck, s.CheckLeaseUntil, s.CheckToken = time.Time{}, time.Time{}, ""
}

// Checking reports whether a verification check holds the record (a live
// check lease): operators wait for its verdict.
func (s *Stored) Checking(now int64) bool { return s.CheckRunning(time.UnixMilli(now)) }

// AddAudit appends an audit entry at now, keeping the newest
// MaxAuditEntries.
func (s *Stored) AddAudit(now int64, actor, action, reason string) {
	s.Audit = append(s.Audit, AuditEntry{At: time.UnixMilli(now), Actor: actor, Action: action, Reason: reason})
	if n := len(s.Audit) - MaxAuditEntries; n > 0 {
		s.Audit = s.Audit[n:] // the newest are kept, as on Redis
	}
}

// CheckRenew validates a Renew's arguments and returns its lease.
func CheckRenew(id string, lease time.Duration) (time.Duration, error) {
	if !validID(id) {
		return 0, ErrInvalidID
	}
	lease = orDefault(lease, DefaultLease)
	if lease < 0 {
		return 0, fmt.Errorf("%w: negative lease", ErrInvalidArgument)
	}
	return lease, nil
}

// CheckComplete validates a Complete's arguments and returns the result
// to store (KeptResult) and its TTL.
func CheckComplete(req CompleteRequest) (Result, time.Duration, error) {
	if err := ValidateComplete(req); err != nil {
		return Result{}, 0, err
	}
	return KeptResult(req.Result), orDefault(req.TTL, DefaultTTL), nil
}

// ValidateComplete validates a Complete's arguments as every engine
// does: the record id (ErrInvalidID, also for a twin digest that is no
// record id), negative durations.
func ValidateComplete(req CompleteRequest) error {
	if !validID(req.Claim.ID) {
		return ErrInvalidID
	}
	if req.TTL < 0 {
		return fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	return checkCompletionRetention(req)
}

// CheckRelease validates a Release's arguments and returns its TTL.
func CheckRelease(id string, ttl time.Duration) (time.Duration, error) {
	ttl = orDefault(ttl, DefaultTTL)
	if ttl < 0 {
		return 0, fmt.Errorf("%w: negative TTL", ErrInvalidArgument)
	}
	if !validID(id) {
		return 0, ErrInvalidID
	}
	return ttl, nil
}

// Release is the record released by its claim (token): the next claim
// executes again. Nil when s does not exist or token does not hold it.
func (s *Stored) Release(now int64, token string, ttl time.Duration) *Stored {
	if s == nil || s.Token != token {
		return nil
	}
	r := s.Clone()
	r.ClearResult()
	r.State, r.Reason = StateReleased, ReasonNotDone
	r.ExpireAt = now + Millis(ttl)
	return r
}

// CheckMarkUnknown validates a MarkUnknown's arguments and returns its
// reason and hold TTL.
func CheckMarkUnknown(id, reason string, holdTTL time.Duration) (string, time.Duration, error) {
	holdTTL = orDefault(holdTTL, DefaultHoldTTL)
	if holdTTL < 0 {
		return "", 0, fmt.Errorf("%w: negative hold TTL", ErrInvalidArgument)
	}
	if reason == "" {
		reason = "unknown"
	}
	if !validID(id) {
		return "", 0, ErrInvalidID
	}
	return reason, holdTTL, nil
}

// MarkUnknown is the record held as outcome unknown by its claim
// (token); a completed record is never demoted. Nil when nothing
// changes.
func (s *Stored) MarkUnknown(now int64, token, reason string, holdTTL time.Duration) *Stored {
	if s == nil || s.Token != token || s.State == StateCompleted {
		return nil
	}
	r := s.Clone()
	r.State, r.Reason = StateUnknown, reason
	r.ExpireAt = now + Millis(holdTTL)
	r.ScheduleFirstCheck(now)
	return r
}

// CheckOperator validates an operator's change of record id by act.
func CheckOperator(id string, act Action) error {
	if !validID(id) {
		return ErrInvalidID
	}
	return act.Validate()
}

// CheckOperatorRelease validates an OperatorRelease's TTL.
func CheckOperatorRelease(ttl time.Duration) (time.Duration, error) {
	ttl = orDefault(ttl, DefaultTTL)
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

// OperatorComplete is the record completed with res (already KeptResult)
// on an operator's word (see Engine.OperatorComplete), or the conflict;
// the engine adds the audit entry.
func (s *Stored) OperatorComplete(now int64, res Result, ttl time.Duration) (*Stored, error) {
	if s.State == StateCompleted || s.State == StateInFlight && MillisOf(s.LeaseUntil) > now || s.Checking(now) {
		return nil, ConflictOf(&s.Record)
	}
	r := s.Clone()
	r.State, r.Token, r.Reason = StateCompleted, NewToken(), ReasonOperator
	r.CompletedAt = time.UnixMilli(now)
	r.SetResult(res)
	r.Request = nil
	r.ExpireAt = now + Millis(ttl)
	return r, nil
}

// BeginCheck is the record with its check lease taken by checkToken for
// lease (see Engine.BeginCheck): the next record (nil: none) and whether
// the call succeeds.
func (s *Stored) BeginCheck(now int64, claimToken, checkToken string, lease time.Duration, due bool) (*Stored, bool) {
	if s.State != StateUnknown || s.Token != claimToken {
		return nil, false
	}
	leased := MillisOf(s.CheckLeaseUntil) > now
	switch {
	case leased && s.CheckToken == checkToken:
		return nil, true // a retried BeginCheck
	case leased, due && (s.NextCheck.IsZero() || MillisOf(s.NextCheck) > now):
		return nil, false
	}
	r := s.Clone()
	r.CheckToken = checkToken
	r.CheckLeaseUntil = time.UnixMilli(now + Millis(lease))
	return r, true
}

// CheckEndCheck validates an EndCheck's outcome and returns it with the
// result an applied verdict stores (digested, copied).
func CheckEndCheck(o CheckOutcome) (CheckOutcome, error) {
	if err := o.Validate(); err != nil {
		return o, err
	}
	if o.Operator != nil {
		if err := o.Operator.Validate(); err != nil {
			return o, err
		}
	}
	if o.Entry.Verdict == VerdictApplied {
		res := o.Result
		if res.Digest == "" {
			sum := sha256.Sum256(res.Body)
			res.Digest = hex.EncodeToString(sum[:])
		}
		res.BodyOmitted = false
		o.Result = KeptResult(res)
	}
	return o, nil
}

// EndCheck is the record with check o (from CheckEndCheck) recorded
// under its lease and its verdict applied (see Engine.EndCheck): the
// next record (nil: none) and whether the call succeeds.
func (s *Stored) EndCheck(now int64, o CheckOutcome) (*Stored, bool) {
	if s.State != StateUnknown || s.Token != o.ClaimToken || s.CheckToken != o.CheckToken {
		return nil, false
	}
	ttl := Millis(orDefault(o.TTL, DefaultTTL))
	r := s.Clone()
	entry := o.Entry
	entry.At = time.UnixMilli(now)
	r.Checks = append(r.Checks, entry)
	if n := len(r.Checks); n > MaxCheckEntries {
		r.Checks = slices.Clone(r.Checks[n-MaxCheckEntries:])
	}
	r.CheckCount++
	r.CheckToken, r.CheckLeaseUntil = "", time.Time{}
	if o.Operator != nil {
		r.Audit = append(r.Audit, AuditEntry{
			At: time.UnixMilli(now), Actor: o.Operator.Actor, Action: AuditVerify, Reason: o.Operator.Reason,
		})
	}
	if entry.Verdict == VerdictNotApplied && (r.NotFoundAt == 0 || now-r.NotFoundAt >= Millis(o.Every)) {
		r.NotFoundStreak++
		r.NotFoundAt = now
	}
	switch {
	case entry.Verdict == VerdictApplied:
		r.State, r.Token, r.Reason = StateCompleted, o.CheckToken, ReasonVerified
		r.Request = nil // a completed record keeps no request
		r.CompletedAt = time.UnixMilli(now)
		r.SetResult(o.Result)
		r.NextCheck = time.Time{}
		r.ExpireAt = now + ttl
	case entry.Verdict == VerdictNotApplied && r.NotFoundStreak >= int64(o.NotFoundChecks):
		r.ClearResult()
		r.State, r.Token, r.Reason = StateReleased, o.CheckToken, ReasonVerifiedNotApplied
		r.Unknowns = 0 // found not applied: no earlier execution took effect
		r.NextCheck = time.Time{}
		r.ExpireAt = now + ttl
	case o.Next > 0:
		r.NextCheck = time.UnixMilli(now + Millis(o.Next))
	default:
		r.NextCheck = time.Time{}
	}
	return r, true
}

// AnswerNotDone is the record after a "not done" execution under its claim
// (req from CheckNotDone): released, or held as retries exhausted once
// the budget is used up. Nil and NotDoneLost when the claim is gone.
func (s *Stored) AnswerNotDone(now int64, req NotDoneRequest) (*Stored, NotDoneOutcome) {
	if s == nil || s.Token != req.Token {
		return nil, NotDoneLost
	}
	r := s.Clone()
	r.ClearResult()
	r.NotDone++
	if req.Unknown {
		r.Unknowns++
	}
	r.Answers = append(r.Answers, Answer{At: time.UnixMilli(now), Status: req.Status})
	if n := len(r.Answers) - MaxAnswers; n > 0 {
		r.Answers = r.Answers[n:]
	}
	if req.MaxExecutions > 0 && r.NotDone >= req.MaxExecutions {
		r.State, r.Reason = StateUnknown, ReasonRetriesExhausted
		r.NextCheck = time.Time{} // known not done: nothing to check
		r.ExpireAt = now + Millis(req.HoldTTL)
		return r, NotDoneExhausted
	}
	r.State, r.Reason = StateReleased, req.ReleasedReason()
	r.ExpireAt = now + Millis(req.TTL)
	return r, NotDoneReleased
}

// Redrive is the record claimed for an operator's re-drive (req from
// CheckRedrive; see Engine.Redrive), or the refusal; the engine adds the
// audit entry.
func (s *Stored) Redrive(now int64, req RedriveRequest) (*Stored, error) {
	if err := RedriveRefusal(&s.Record, time.UnixMilli(now)); err != nil {
		return nil, err
	}
	r := s.Clone()
	r.ClearResult()
	r.State, r.Token = StateInFlight, req.Token
	r.StartedAt, r.LeaseUntil = time.UnixMilli(now), time.UnixMilli(now+Millis(req.Lease))
	r.Executions++
	r.CheckCount, r.NextCheck, r.NotFoundStreak, r.CheckLeaseUntil = 0, time.Time{}, 0, time.Time{}
	r.CheckToken, r.NotFoundAt = "", 0
	r.ExpireAt = now + Millis(req.HoldTTL)
	return r, nil
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
