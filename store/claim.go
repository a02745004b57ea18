package store

import (
	"context"
	"time"
)

// Claim is a claim you hold: the right to call the upstream once for one
// record, fenced by its token. Its methods carry the record id, the token,
// the lease and the lifetimes, so nothing else needs to pass them along.
// Each method is one store call; false (not an error) means the claim was
// taken over and the call changed nothing.
type Claim struct {
	engine ClaimOps
	req    ClaimRequest
	// StartedAt is when the claim was made, on the store's clock.
	StartedAt time.Time
	// TTL is how long a completed or released record lives.
	TTL time.Duration
}

// NewClaim returns the claim that req made (or may have made, when its
// answer was lost) on e, started at startedAt on the store's clock. ttl is
// the lifetime of the record once completed or released.
func NewClaim(e ClaimOps, req ClaimRequest, startedAt time.Time, ttl time.Duration) *Claim {
	return &Claim{engine: e, req: req, StartedAt: startedAt, TTL: ttl}
}

// ID is the record id.
func (c *Claim) ID() string { return c.req.ID }

// Lease is how long the claim lives without renewal.
func (c *Claim) Lease() time.Duration { return orDefault(c.req.Lease, DefaultLease) }

// Renew extends the lease from now.
func (c *Claim) Renew(ctx context.Context) (bool, error) {
	return c.engine.Renew(ctx, c.req.ID, c.req.Token, c.req.Lease)
}

// Complete stores the upstream's result; see CompleteRequest, also for a
// record that a failover lost.
func (c *Claim) Complete(ctx context.Context, res Result) (bool, error) {
	return c.engine.Complete(ctx, CompleteRequest{
		Claim: c.req, StartedAt: c.StartedAt, Result: res, TTL: c.TTL,
		Tombstone: c.req.Tombstone, Twin: c.req.Twin, TwinWindow: c.req.TwinWindow,
	})
}

// Release says the call had no effect: the next retry executes.
func (c *Claim) Release(ctx context.Context) (bool, error) {
	return c.engine.Release(ctx, c.req.ID, c.req.Token, c.TTL)
}

// MarkUnknown holds the record as outcome unknown for reason.
func (c *Claim) MarkUnknown(ctx context.Context, reason string) (bool, error) {
	return c.engine.MarkUnknown(ctx, c.req.ID, c.req.Token, reason, c.req.HoldTTL)
}

// ClaimOps are the fenced calls of an Engine that a Claim makes.
type ClaimOps interface {
	Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error)
	Complete(ctx context.Context, req CompleteRequest) (bool, error)
	Release(ctx context.Context, id, token string, ttl time.Duration) (bool, error)
	MarkUnknown(ctx context.Context, id, token, reason string, holdTTL time.Duration) (bool, error)
	NotDone(ctx context.Context, req NotDoneRequest) (NotDoneOutcome, error)
}

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
