package store

import (
	"cmp"
	"fmt"
	"time"
)

// The re-drive: an operator runs the operation once more through the
// same fenced path, from the request the record kept, where the
// operation is known not to have taken effect (KnownNotDone).

// AuditRun: an operator ran the operation again (Redrive).
const AuditRun = "run"

// RedriveRequest claims a record for an operator's re-drive.
type RedriveRequest struct {
	ID string
	// Token is the new claim's fencing token (NewToken).
	Token string
	// Lease and HoldTTL are the claim's, as for a ClaimRequest.
	Lease, HoldTTL time.Duration
	// Act is who runs it and why, kept on the audit trail.
	Act Action
}

// CheckRedrive validates a RedriveRequest as every engine does and applies
// the defaults.
func CheckRedrive(req RedriveRequest) (RedriveRequest, error) {
	if !ValidID(req.ID) {
		return req, ErrInvalidID
	}
	if req.Token == "" {
		return req, fmt.Errorf("%w: a re-drive without a token", ErrInvalidArgument)
	}
	req.Lease, req.HoldTTL = cmp.Or(req.Lease, DefaultLease), cmp.Or(req.HoldTTL, DefaultHoldTTL)
	if req.Lease < 0 || req.HoldTTL < 0 {
		return req, fmt.Errorf("%w: negative lease or hold TTL", ErrInvalidArgument)
	}
	return req, req.Act.Validate()
}

// KnownNotDone reports whether rec's operation is known not to have
// taken effect, the condition of a re-drive: released by an operator
// (ReasonOperator) or by verification (ReasonVerifiedNotApplied), or
// released or held as retries exhausted after "not done" answers only
// (ReasonNotDone, ReasonRetriesExhausted, with no unknown outcome among
// the executions counted). A record that on_unknown_outcome: release let
// go, a budget used up partly by such outcomes, a record held as outcome
// unknown, and a record released before releases said why are not.
func KnownNotDone(rec *Record) bool {
	switch {
	case rec.State == StateReleased:
		switch rec.Reason {
		case ReasonOperator, ReasonVerifiedNotApplied:
			return true
		case ReasonNotDone, ReasonRefused:
			return rec.Unknowns == 0
		}
	case rec.State == StateUnknown && rec.Reason == ReasonRetriesExhausted:
		return rec.Unknowns == 0
	}
	return false
}

// RedriveRefusal is why a record may not be re-driven at now, as every
// engine words it (nil: it may). A re-drive needs a kept request and an
// operation known not to have taken effect (KnownNotDone). Anything else
// is refused until someone verifies it, or releases it on knowing the
// operation did not take effect.
func RedriveRefusal(rec *Record, now time.Time) error {
	switch {
	case rec.CheckRunning(now):
		return ConflictOf(rec)
	case rec.State == StateInFlight && rec.LeaseUntil.After(now):
		return ConflictOf(rec)
	case rec.State == StateCompleted:
		return fmt.Errorf("%w: %s is already completed; retries replay its result", ErrConflict, rec.ID)
	case !KnownNotDone(rec):
		return fmt.Errorf("%w: %s: the upstream may have acted (%s); running it again could do it twice: verify it upstream, "+
			"then complete it with the upstream's answer, or release it once you know the operation did not take effect, then run it",
			ErrConflict, rec.ID, mayHaveActed(rec))
	case len(rec.Request) == 0:
		return fmt.Errorf("%w: %s kept no request to run (its route does not set keep_request)", ErrConflict, rec.ID)
	}
	return nil
}

// mayHaveActed says why rec's operation is not known not done.
func mayHaveActed(rec *Record) string {
	switch {
	case rec.State == StateInFlight:
		return "its call's lease ran out without a result"
	case rec.Class() == StateExhausted:
		return fmt.Sprintf("its retries were used up, %d of them by unknown outcomes that on_unknown_outcome: release let go", rec.Unknowns)
	case rec.State == StateUnknown:
		return "it is held as outcome unknown"
	case rec.Reason == ReasonUnknownReleased:
		return "it was released by on_unknown_outcome: release after an unknown outcome"
	case rec.Reason == ReasonNotDone:
		return fmt.Sprintf("%d earlier executions had unknown outcomes that on_unknown_outcome: release let go", rec.Unknowns)
	}
	return "it was released without a recorded reason"
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

// ClaimFor is the handle of the claim that a re-drive of rec made with
// req: it records the run's outcome like any execution's.
func ClaimFor(e ClaimOps, rec *Record, req RedriveRequest, ttl time.Duration) *Claim {
	return NewClaim(e, ClaimRequest{
		ID: rec.ID, Route: rec.Route, Operation: rec.Operation,
		Fingerprint: rec.Fingerprint, FingerprintRule: rec.FingerprintRule,
		Token: req.Token, Lease: req.Lease, HoldTTL: req.HoldTTL, TTL: ttl,
	}, rec.StartedAt, ttl)
}
