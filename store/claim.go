package store

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// The claim: the right to execute an operation once, fenced by a token
// (see Engine.Claim for the rules). ValidateClaim checks the request and
// applies the defaults; Stored.Claim is the whole rule for an engine that
// runs it in Go, from the record as the engine read it to the record it
// writes: a claim that finds no record decides with Fresh (its id's
// tombstone and its payload's twin) between NewRecord, HeldSamePayload
// and nothing; one that finds a released record takes it over for the
// same payload, or for any when it is Free, with the claim's own check
// (KeptCheck, NewClaimChecks) and kept request (KeptRequest).

// ClaimRequest asks for the right to execute one operation.
type ClaimRequest struct {
	ID              string // record id (keying.KeyID)
	Route           string
	Operation       string
	Fingerprint     string
	FingerprintRule string
	// Token fences the claim; use NewToken. Must not be empty.
	Token string
	// Lease is how long the claim lives without Renew (default 30s).
	Lease time.Duration
	// HoldTTL is the key's lifetime while in flight or held as unknown
	// (default 720h).
	HoldTTL time.Duration
	// TTL is how long the record lives once the claim completes or
	// releases it (default 24h): the Claim handle's.
	TTL time.Duration
	// OnExpired decides what happens to an in-flight record whose lease
	// ran out (its gateway died mid-call): ExpiredHold (the default, also
	// for "") or ExpiredRelease.
	OnExpired Expired
	// MaxExecutions is the route's retry budget (0: none). Under
	// ExpiredRelease the call whose lease ran out is an unknown outcome
	// let go: a claim that takes such a record over counts it (NotDone and
	// Unknowns grow by one), and when that uses the budget up the record
	// is held with ReasonRetriesExhausted instead (not claimed).
	MaxExecutions int64
	// Check is the lookup that verifies the outcome if it turns out
	// unknown (see BeginCheck), kept on the record by a claim that creates
	// or takes it over; zero for a route without verification.
	Check Check
	// Request is the request sealed by the gateway for a re-drive, kept
	// on the record by a claim that creates or takes it over (replacing
	// the one kept before) and dropped when the record completes; nil
	// for a route that keeps none.
	Request []byte
	// Call is the tool call of a route guarding an MCP server, as
	// operators may see it (NewToolCall: redacted, bounded), kept on the
	// record by a claim that creates or takes it over; nil elsewhere.
	Call *ToolCall

	// AfterExpiry decides a claim that finds no record (absent or
	// expired) but a live tombstone of ID: AfterExpiryExecute (the
	// default, also for "") claims as usual, AfterExpiryReject creates
	// nothing and does not claim. Either way ClaimResult.Tombstone
	// reports it. A claim that finds a live record ignores tombstones,
	// and so does one with neither a Tombstone nor AfterExpiryReject (its
	// route keeps none: it pays no lookup).
	AfterExpiry AfterExpiry
	// Twin is the digest of the operation's route, scope and payload, a
	// valid record id (the handler derives it like one); "" turns the
	// same-payload detector off. When the claim would create the record
	// and a live twin entry of Twin names another record id,
	// ClaimResult.Twin reports it and OnTwin applies.
	Twin string
	// OnTwin is what a claim reporting a twin does: TwinWarn (the
	// default, also for ""), TwinHold or TwinReject.
	OnTwin TwinAction
	// Tombstone and TwinWindow are the Claim handle's, like TTL: its
	// Complete passes them (with Twin) on as CompleteRequest's. A
	// Tombstone also makes the claim look for one (see AfterExpiry).
	Tombstone, TwinWindow time.Duration
}

// ClaimResult is the outcome of Claim.
type ClaimResult struct {
	// Claimed is true when the caller now owns the key with req.Token and
	// must call the upstream.
	Claimed bool
	// Claim is the claim the caller holds when Claimed: the handle that
	// renews, completes, releases or holds it; else nil.
	Claim *Claim
	// TakeOver is true when the claim replaced a released record or an
	// in-flight one whose lease ran out (executions were incremented).
	TakeOver bool
	// Record is the record as the claim left it (with the full body when
	// completed). Set when err is nil, but for a claim that created
	// nothing (AfterExpiryReject with a tombstone, TwinReject with a
	// twin): nil.
	Record *Record
	// Now is the store's clock when the claim was decided: the clock the
	// store decided lease expiry by. Compare Record.LeaseUntil with Now,
	// never with the local clock, so gateways with skewed clocks agree.
	Now time.Time
	// Tombstone is the live tombstone of the id that a claim finding no
	// record found (whatever AfterExpiry did with it); nil otherwise.
	Tombstone *Tombstone
	// Twin is the record another key completed with the same payload,
	// found by a claim that would create the record (whatever OnTwin did
	// with it); nil otherwise, and never the claim's own id.
	Twin *Twin
}

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
// without a name or too large) and applies the defaults. Every refusal
// wraps ErrInvalidID or ErrInvalidArgument.
func ValidateClaim(req ClaimRequest) (ClaimArgs, error) {
	if !ValidID(req.ID) {
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
	a := ClaimArgs{Lease: cmp.Or(req.Lease, DefaultLease), HoldTTL: cmp.Or(req.HoldTTL, DefaultHoldTTL)}
	if a.Lease < 0 || a.HoldTTL < 0 || req.MaxExecutions < 0 {
		return ClaimArgs{}, fmt.Errorf("%w: negative lease, hold TTL or budget", ErrInvalidArgument)
	}
	var ok bool
	if a.OnExpired, ok = policy(req.OnExpired, ExpiredHold, ExpiredRelease); !ok {
		return ClaimArgs{}, fmt.Errorf("%w: OnExpired %q is not hold or release", ErrInvalidArgument, req.OnExpired)
	}
	if err := checkRetention(req.Twin, req.Tombstone, req.TwinWindow); err != nil {
		return ClaimArgs{}, err
	}
	if a.AfterExpiry, ok = policy(req.AfterExpiry, AfterExpiryExecute, AfterExpiryReject); !ok {
		return ClaimArgs{}, fmt.Errorf("%w: AfterExpiry %q is not execute or reject", ErrInvalidArgument, req.AfterExpiry)
	}
	if a.OnTwin, ok = policy(req.OnTwin, TwinWarn, TwinHold, TwinReject); !ok {
		return ClaimArgs{}, fmt.Errorf("%w: OnTwin %q is not warn, hold or reject", ErrInvalidArgument, req.OnTwin)
	}
	a.Tombstones = req.Tombstone > 0 || a.AfterExpiry == AfterExpiryReject
	return a, nil
}

// policy is v, or def (the first allowed value) for "": false when v is
// none of the allowed values.
func policy[T ~string](v T, def T, others ...T) (T, bool) {
	if v == "" || v == def {
		return def, true
	}
	if slices.Contains(others, v) {
		return v, true
	}
	return "", false
}

// OnTombstone is what a tombstone found makes the claim do: AfterExpiry,
// or "" when the claim looks for none (see ClaimArgs.Tombstones).
func (a ClaimArgs) OnTombstone() AfterExpiry {
	if !a.Tombstones {
		return ""
	}
	return a.AfterExpiry
}

// Fresh is what a claim that finds no live record does, given what it
// found of the id's past (a tombstone) and of the payload's (a twin).
type Fresh int

const (
	// FreshCreate: create the record in flight and claim it.
	FreshCreate Fresh = iota
	// FreshHold: create the record held with ReasonSamePayload.
	FreshHold
	// FreshReject: create nothing.
	FreshReject
)

// Fresh decides a claim of an absent record from the live tombstone of
// its id and the live twin entry of its twin digest (nil: none; a twin
// naming the claim's own id is no twin: the caller drops it).
func (a ClaimArgs) Fresh(tomb *Tombstone, twin *Twin) Fresh {
	switch {
	case tomb != nil && a.AfterExpiry == AfterExpiryReject:
		return FreshReject
	case twin != nil && a.OnTwin == TwinReject:
		return FreshReject
	case twin != nil && a.OnTwin == TwinHold:
		return FreshHold
	}
	return FreshCreate
}

// ClaimWrite is what a claim writes (Stored.Claim); how durable the
// write must be before the claim answers follows from it.
type ClaimWrite int

const (
	// WriteNothing: the claim writes nothing (a tombstone or a twin
	// refused it, or it is its caller's claim retried).
	WriteNothing ClaimWrite = iota
	// WriteClaimed: the record created or taken over, in flight under
	// the claim: on disk before the upstream is called, and undone when
	// the claim's caller never hears of it.
	WriteClaimed
	// WriteHeld: the record held as outcome unknown (a lease that ran
	// out, a budget used up, a payload completed under another key): on
	// disk before the claim answers.
	WriteHeld
	// WriteCounted: only the record's attempt count changed; nothing
	// waits for it.
	WriteCounted
)

// Claim decides req's claim of the record as it is (s; nil when no live
// record) at now (the store's clock, ms), with its defaults applied (a),
// the live tombstone of its id that the claim found (tomb; nil when none
// or when it looks for none) and the live twin entry of its payload (twin;
// nil when none): the record to write, and what writing it is. It sets
// res's Claimed, TakeOver, Tombstone and Twin (a twin naming req.ID is a
// retry of the record itself, no twin).
func (s *Stored) Claim(now int64, req ClaimRequest, a ClaimArgs, tomb *Tombstone, twin *Twin, res *ClaimResult) (*Stored, ClaimWrite) {
	switch {
	case s == nil:
		if twin != nil && twin.ID == req.ID {
			twin = nil
		}
		res.Tombstone, res.Twin = tomb, twin
		switch a.Fresh(tomb, twin) {
		case FreshReject:
			return nil, WriteNothing
		case FreshHold:
			return &Stored{Record: HeldSamePayload(req, time.UnixMilli(now)), ExpireAt: now + Millis(a.HoldTTL)}, WriteHeld
		}
		res.Claimed = true
		return &Stored{Record: NewRecord(req, time.UnixMilli(now), a.Lease), ExpireAt: now + Millis(a.HoldTTL)}, WriteClaimed
	case s.State == StateInFlight && s.Token == req.Token:
		res.Claimed = true // a retried claim: already the caller's
		return nil, WriteNothing
	}
	out := s.Clone()
	out.Attempts++
	hold := Millis(a.HoldTTL)
	expired := s.State == StateInFlight && MillisOf(s.LeaseUntil) <= now
	same := s.Fingerprint == req.Fingerprint && s.FingerprintRule == req.FingerprintRule
	switch {
	case expired && a.OnExpired != ExpiredRelease:
		out.State, out.Reason, out.ExpireAt = StateUnknown, "lease_expired", now+hold
		out.ScheduleFirstCheck(now)
		return out, WriteHeld
	case same && (expired || s.State == StateReleased), Free(&s.Record):
		if expired { // an unknown outcome let go: it counts against the budget
			out.NotDone++
			out.Unknowns++
			if req.MaxExecutions > 0 && out.NotDone >= req.MaxExecutions {
				out.State, out.Reason, out.ExpireAt = StateUnknown, ReasonRetriesExhausted, now+hold
				out.NextCheck = time.Time{}
				return out, WriteHeld
			}
		}
		out.ClearResult()
		out.State, out.Token, out.Route = StateInFlight, req.Token, req.Route
		out.StartedAt, out.LeaseUntil = time.UnixMilli(now), time.UnixMilli(now+Millis(a.Lease))
		out.Executions++
		out.ExpireAt = now + hold
		out.NewClaimChecks(KeptCheck(req.Check))
		out.Request = KeptRequest(req.Request)
		out.Call = req.Call
		out.Fingerprint, out.FingerprintRule = req.Fingerprint, req.FingerprintRule
		res.Claimed, res.TakeOver = true, true
		return out, WriteClaimed
	default:
		return out, WriteCounted
	}
}

// NewRecord is the record a claim of a new key creates: what req asked
// for, in flight under req.Token since now (the store's clock), its lease
// running from then, attempts and executions 1.
func NewRecord(req ClaimRequest, now time.Time, lease time.Duration) Record {
	check := req.Check.Normalized()
	check.Match = slices.Clone(check.Match) // not the caller's
	return Record{
		ID:              req.ID,
		Route:           req.Route,
		Operation:       req.Operation,
		Fingerprint:     req.Fingerprint,
		FingerprintRule: req.FingerprintRule,
		State:           StateInFlight,
		Token:           req.Token,
		StartedAt:       now,
		LeaseUntil:      now.Add(time.Duration(Millis(lease)) * time.Millisecond),
		Attempts:        1,
		Executions:      1,
		Check:           check,
		Request:         slices.Clone(req.Request), // not the caller's
		Call:            req.Call,                  // never changed once made
	}
}

// HeldSamePayload is the record a claim held by TwinHold creates: what
// req asked for, held as outcome unknown with ReasonSamePayload since now,
// never executed, with no lease and no check (nothing to look up: it was
// not forwarded); it keeps the sealed request.
func HeldSamePayload(req ClaimRequest, now time.Time) Record {
	r := NewRecord(req, now, 0)
	r.State, r.Reason = StateUnknown, ReasonSamePayload
	r.LeaseUntil, r.Executions, r.Check = time.Time{}, 0, Check{}
	return r
}

// Free reports whether rec was released because the upstream refused its
// request as sent (ReasonRefused) and no execution of it had an unknown
// outcome: nothing took effect and the same request will not come back,
// so a claim of any payload takes it over, as Stripe's keys save nothing
// for a request that did not begin executing. Any other released record
// is taken over only by its own payload.
func Free(rec *Record) bool {
	return rec.State == StateReleased && rec.Reason == ReasonRefused && rec.Unknowns == 0
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

// NewClaimChecks starts a new claim's checks: its own check, no count,
// streak, schedule or lease; the log of earlier checks stays.
func (s *Stored) NewClaimChecks(c Check) {
	s.Check = c
	s.CheckCount, s.NotFoundStreak, s.NotFoundAt = 0, 0, 0
	s.NextCheck, s.CheckLeaseUntil, s.CheckToken = time.Time{}, time.Time{}, ""
}

// Renewal: a live claim's lease extended from now.

// CheckRenew validates a Renew's arguments and returns its lease.
func CheckRenew(id string, lease time.Duration) (time.Duration, error) {
	if !ValidID(id) {
		return 0, ErrInvalidID
	}
	lease = cmp.Or(lease, DefaultLease)
	if lease < 0 {
		return 0, fmt.Errorf("%w: negative lease", ErrInvalidArgument)
	}
	return lease, nil
}
