package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// Verification: a record held as outcome unknown on a route that says how
// to look the operation up by its key (the route's verify rule) is checked
// by the gateways, one check at a time, before an operator is needed. The
// claim keeps the resolved check on the record (ClaimRequest.Check), so any
// gateway can run it later without the request. A check is fenced twice:
// by the check lease (BeginCheck), so no two checks of one record run at
// once, and by the claim token the record was held under, so a verdict
// never lands on a record that an operator or a late real result resolved
// meanwhile (EndCheck).

// Fence is a record held as outcome unknown, as someone saw it: its id
// and the token of the claim it was held from. A check of it counts only
// while the record is still held under that claim, that is while the
// fence Holds the record.
type Fence struct{ id, token string }

// Fence is the fence of the record as it is now: its id and its token.
func (r *Record) Fence() Fence { return Fence{r.ID, r.Token} }

// Fence is the fence of the record once the claim has marked it unknown.
func (c *Claim) Fence() Fence { return Fence{c.req.ID, c.req.Token} }

// ID is the fenced record's id.
func (f Fence) ID() string { return f.id }

// Holds reports whether rec is still outcome_unknown under this fence.
func (f Fence) Holds(rec *Record) bool {
	return rec != nil && rec.State == StateUnknown && rec.ID == f.id && rec.Token == f.token
}

// CheckOps are the calls of an Engine that a CheckLease makes.
type CheckOps interface {
	BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*Record, bool, error)
	EndCheck(ctx context.Context, o CheckOutcome) (*Record, bool, error)
}

// CheckLease is the right to run one verification check of a held record
// and record its verdict, which no other check has meanwhile.
type CheckLease struct {
	ops   CheckOps
	fence Fence
	token string
}

// BeginCheck takes the check lease of the record fenced by f on e for lease,
// under a new check token (see Engine.BeginCheck for when it is refused).
// The lease is nil when it was refused; rec is the record as e left it
// (nil when it does not exist).
func BeginCheck(ctx context.Context, e CheckOps, f Fence, lease time.Duration, due bool) (*CheckLease, *Record, error) {
	token := NewToken()
	rec, ok, err := e.BeginCheck(ctx, f.id, f.token, token, lease, due)
	if err != nil || !ok {
		return nil, rec, err
	}
	return &CheckLease{ops: e, fence: f, token: token}, rec, nil
}

// End records the check and applies its verdict under the lease (see
// Engine.EndCheck): false, with the current record, when the record was
// resolved meanwhile or the lease ran out and another check took over.
func (l *CheckLease) End(ctx context.Context, r CheckReport) (*Record, bool, error) {
	return l.ops.EndCheck(ctx, CheckOutcome{ID: l.fence.id, ClaimToken: l.fence.token, CheckToken: l.token, CheckReport: r})
}

// Taking the check lease.

// ValidateBeginCheck checks BeginCheck's arguments as every engine must:
// a valid id (ErrInvalidID), both tokens and a positive lease
// (ErrInvalidArgument).
func ValidateBeginCheck(id, claimToken, checkToken string, lease time.Duration) error {
	switch {
	case !ValidID(id):
		return ErrInvalidID
	case claimToken == "" || checkToken == "":
		return fmt.Errorf("%w: a check needs the claim token and a check token", ErrInvalidArgument)
	case lease <= 0:
		return fmt.Errorf("%w: the check lease must be positive", ErrInvalidArgument)
	}
	return nil
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

// Ending the check: the verdict applied under the lease.

// Check verdicts: what one check found.
const (
	// VerdictApplied: the lookup found the operation's result.
	VerdictApplied = "applied"
	// VerdictNotApplied: the lookup answered that the operation did not
	// take effect.
	VerdictNotApplied = "not_applied"
	// VerdictInconclusive: the lookup answered something else (another
	// status, a body that is not JSON, one too large, an answer about
	// another operation or a list of several).
	VerdictInconclusive = "inconclusive"
	// VerdictError: the lookup gave no answer (connection refused, a
	// timeout, a check URL that does not resolve).
	VerdictError = "error"
)

// ValidVerdict reports whether v is one of the Verdict constants.
func ValidVerdict(v string) bool {
	switch v {
	case VerdictApplied, VerdictNotApplied, VerdictInconclusive, VerdictError:
		return true
	}
	return false
}

// Reasons of records that a check resolved.
const (
	// ReasonVerified: completed with the lookup's answer.
	ReasonVerified = "verified"
	// ReasonVerifiedNotApplied: released after NotFoundChecks "not
	// applied" answers; the next retry executes.
	ReasonVerifiedNotApplied = "verified_not_applied"
)

// MaxCheckEntries is how many checks a record keeps, the newest.
const MaxCheckEntries = 20

// CheckOutcome ends a check: EndCheck records it and applies its verdict.
type CheckOutcome struct {
	// ID is the record; ClaimToken the token it was held under and
	// CheckToken the check lease's, as given to BeginCheck.
	ID, ClaimToken, CheckToken string
	CheckReport
}

// CheckReport is what a check found and what follows from it: the part
// of a CheckOutcome that a CheckLease's End takes.
type CheckReport struct {
	// Entry is what the check found (At is set by the store).
	Entry CheckEntry
	// Result is what a retry replays when the verdict is applied: the
	// lookup's status (or the route's replay_status), body and
	// Content-Type, and the external id it found.
	Result Result
	// NotFoundChecks is how many counted "not applied" answers in a row
	// release the record (at least 1).
	NotFoundChecks int
	// Every is the least time between two counted "not applied" answers:
	// one that comes sooner after the last counted one is recorded but
	// does not count.
	Every time.Duration
	// Next is how long until the next scheduled check; 0 when none is
	// scheduled (its attempts are used up).
	Next time.Duration
	// TTL is how long a completed or released record lives (default 24h).
	TTL time.Duration
	// Tombstone is how long the tombstone of a record an applied verdict
	// completes outlives it (0: none; see CompleteRequest.Tombstone).
	Tombstone time.Duration
	// Operator, when set, is who asked for the check and why: kept on the
	// record as an audit entry (action "verify") in the same step, when
	// the check is recorded.
	Operator *Action
}

// Validate checks an outcome's arguments as every engine's EndCheck
// must (ErrInvalidID, ErrInvalidArgument).
func (o CheckOutcome) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: check outcome: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	switch {
	case !ValidID(o.ID):
		return ErrInvalidID
	case o.ClaimToken == "" || o.CheckToken == "":
		return bad("no claim or check token")
	case !ValidVerdict(o.Entry.Verdict):
		return bad("verdict %q is not one of applied, not_applied, inconclusive, error", o.Entry.Verdict)
	case o.Entry.Status != 0 && (o.Entry.Status < 100 || o.Entry.Status > 599):
		return bad("status %d is not an HTTP status", o.Entry.Status)
	case o.NotFoundChecks < 1:
		return bad("not found checks %d is below 1", o.NotFoundChecks)
	case o.Every < 0 || o.Next < 0 || o.TTL < 0 || o.Tombstone < 0:
		return bad("negative duration")
	case o.Entry.Verdict == VerdictApplied && (o.Result.Status < 100 || o.Result.Status > 599):
		return bad("result status %d is not an HTTP status", o.Result.Status)
	}
	return nil
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
	ttl := Millis(cmp.Or(o.TTL, DefaultTTL))
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
		r.Token, r.Reason = o.CheckToken, ReasonVerified
		r.completed(now, o.Result, now+ttl)
		r.NextCheck = time.Time{}
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
