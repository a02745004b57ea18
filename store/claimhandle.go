package store

import (
	"cmp"
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
func (c *Claim) Lease() time.Duration { return cmp.Or(c.req.Lease, DefaultLease) }

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

// NotDone records that the claim's execution ended "not done" with
// status: released, or held when it used up max "not done" executions
// (0: no budget).
func (c *Claim) NotDone(ctx context.Context, status int, max int64) (NotDoneOutcome, error) {
	return c.notDone(ctx, status, max, false)
}

// LetGo records that the claim's execution had an unknown outcome that
// the route's policy (on_unknown_outcome: release) lets go: released
// (ReasonUnknownReleased), or held once it uses up max executions, like
// NotDone.
func (c *Claim) LetGo(ctx context.Context, status int, max int64) (NotDoneOutcome, error) {
	return c.notDone(ctx, status, max, true)
}

func (c *Claim) notDone(ctx context.Context, status int, max int64, unknown bool) (NotDoneOutcome, error) {
	return c.engine.NotDone(ctx, NotDoneRequest{
		ID: c.req.ID, Token: c.req.Token, Status: status, Unknown: unknown, MaxExecutions: max,
		TTL: c.TTL, HoldTTL: c.req.HoldTTL,
	})
}

// ClaimOps are the fenced calls of an Engine that a Claim makes.
type ClaimOps interface {
	Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error)
	Complete(ctx context.Context, req CompleteRequest) (bool, error)
	Release(ctx context.Context, id, token string, ttl time.Duration) (bool, error)
	MarkUnknown(ctx context.Context, id, token, reason string, holdTTL time.Duration) (bool, error)
	NotDone(ctx context.Context, req NotDoneRequest) (NotDoneOutcome, error)
}
