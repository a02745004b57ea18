package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/unrecorded"
)

// Claim takes the right to execute op's key, or finds the record that
// answers it (Found.Record, with the store's clock in Found.Now). It
// returns the claim the request now holds, or nil when the record
// answers it, and what the claim found on its way.
//
// A record held as outcome unknown, found by a retry on a route with a
// verify rule, is settled with the upstream first (Verifier.Settle): a
// verified result answers the retry, a record found not applied (released)
// or gone is claimed again, and one still held answers 409. On a route
// whose duplicates wait, a duplicate of a request in flight waits for it
// (see wait.go), watching the record from before its claim, while a
// waiting place is free; one that would go on to execute asks the route's
// breaker again (adm).
func (g *Gate) Claim(ctx context.Context, op *Operation, adm *Admission) (*store.Claim, Found, error) {
	var f Found
	var wt *waiter
	if op.Route.Waiting {
		wt = g.watch(op.Route, op.ID)
		defer wt.stop()
	}
	c, err := g.claimOrSettle(ctx, op, &f)
	if err != nil || c != nil || !g.shouldWait(wt, op, &f) {
		return c, f, err
	}
	leave, ok := g.enterWait(op, &f)
	if !ok {
		return nil, f, nil // answered as without waiting
	}
	defer leave()
	c, err = g.await(ctx, op, adm, &f, wt)
	return c, f, err
}

// claimOrSettle claims the key, or settles the held record found with
// the upstream (settleHeld).
func (g *Gate) claimOrSettle(ctx context.Context, op *Operation, f *Found) (*store.Claim, error) {
	c, err := g.claimKey(ctx, op, f)
	if err != nil || c != nil {
		return c, err
	}
	return g.settleHeld(ctx, op, f)
}

// settleHeld asks the Verifier to settle f.Record when it is held as
// outcome unknown on a route with a verify rule and the request is its
// retry: nil when the record answers the request (f.Record, completed or
// still held), or the claim of a record the check released (or that is
// gone).
func (g *Gate) settleHeld(ctx context.Context, op *Operation, f *Found) (*store.Claim, error) {
	rec := f.Record
	if rec == nil || rec.Class() != store.StateUnknown || rec.Reason == store.ReasonSamePayload || op.Route.Verify == nil || !g.SameFingerprint(op, rec) {
		return nil, nil
	}
	after, note := g.Verifier.Settle(ctx, &op.Route.Resolved, rec, op.Check)
	if note != "" {
		f.Note = note
	}
	if after != nil && after.State != store.StateReleased {
		f.Record = after
		return nil, nil
	}
	return g.claimKey(ctx, op, f)
}

// claimKey asks the store for the request's key once (twice when the
// record was made under an earlier fingerprint rule).
//
// A released record, or one whose lease ran out, that was made under an
// earlier fingerprint rule is taken over only with the fingerprint that
// rule gives this request: a reload that changed the rule never turns a
// genuine retry into a mismatch, nor a different payload into a takeover.
func (g *Gate) claimKey(ctx context.Context, op *Operation, f *Found) (*store.Claim, error) {
	if kc := g.Kept.Find(unrecorded.Key{Engine: g.Store, ID: op.ID}); kc != nil {
		// This gateway keeps the key's result, which the store refused
		// for want of room: written first, so the retry replays the
		// answer its client got, or fails closed while it cannot be.
		if _, err := g.writeKept(kc, zap.String("tried_by", "a retry of its key")); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKeptUnwritten, err)
		}
	}
	req := claimRequest(op, op.FP, op.Route.FPRule)
	res, err := g.claimOnce(ctx, req)
	if err == nil {
		if oldFP, ok := g.claimableUnderOldRule(res, op); ok {
			req = claimRequest(op, oldFP, res.Record.FingerprintRule)
			res, err = g.claimOnce(ctx, req)
		}
	}
	if err != nil {
		return nil, err
	}
	f.Record, f.Now = res.Record, res.Now
	if res.Tombstone != nil || res.Twin != nil {
		g.noteRetention(op, f, res)
	}
	return res.Claim, nil
}

// claimRequest asks for the request's key under a fingerprint and the
// rule that made it, with a fresh token.
func claimRequest(op *Operation, fp, fpRule string) store.ClaimRequest {
	rt := op.Route
	req := store.ClaimRequest{
		ID:              op.ID,
		Route:           rt.Name,
		Operation:       rt.Operation,
		Fingerprint:     fp,
		FingerprintRule: fpRule,
		Token:           store.NewToken(),
		Lease:           rt.LockLease,
		HoldTTL:         rt.HoldTTL,
		TTL:             rt.TTL,
		OnExpired:       expiredPolicy(rt.OnUnknownOutcome),
		MaxExecutions:   int64(rt.MaxExecutions),
		Check:           op.Check,
		Request:         op.Sealed,
		Tombstone:       rt.TombstoneTTL,
		AfterExpiry:     store.AfterExpiry(rt.AfterExpiry),
	}
	if op.Payload != "" {
		samePayloadOptions(op, &req)
	}
	if op.Call != nil {
		req.Call = keptCall(op)
	}
	return req
}

// claimOnce runs one claim. The claim must not be abandoned halfway
// because the client hung up: a claim that landed but whose answer was
// lost would sit until its lease ran out. The store bounds every call by
// op_timeout itself.
func (g *Gate) claimOnce(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	began := time.Now()
	res, err := g.Store.Claim(context.WithoutCancel(ctx), req)
	g.Metrics.ObserveStore("claim", began, err)
	if err != nil {
		// The script may have run even though its answer was lost: give
		// the claim back so it does not wait out its lease as "unknown".
		g.Use.Enter()
		go g.ReleaseLost(store.NewClaim(g.Store, req, time.Time{}, req.TTL))
		return res, fmt.Errorf("claiming key %s: %w", req.ID, err)
	}
	return res, nil
}

// ReleaseLost gives back a claim whose answer may have been lost, or
// that goes back unused. It runs in the background, its caller having
// entered the store's use, and leaves it when done.
func (g *Gate) ReleaseLost(c *store.Claim) {
	defer g.Use.Leave()
	ctx, cancel := context.WithTimeout(context.Background(), g.OpTimeout)
	defer cancel()
	_, _ = c.Release(ctx)
}

// claimableUnderOldRule returns the fingerprint to claim with when an
// unclaimed record could be taken over (released, or its lease ran out)
// but was made under an earlier fingerprint rule that gives this request
// the record's fingerprint. Lease expiry is judged as the claim script
// judges it, by the store's clock the script ran at (lease_until <= now),
// never by this gateway's clock.
func (g *Gate) claimableUnderOldRule(res store.ClaimResult, op *Operation) (oldFP string, ok bool) {
	rec := res.Record
	if res.Claimed || rec == nil || rec.FingerprintRule == op.Route.FPRule {
		return "", false
	}
	expired := rec.State == store.StateInFlight && !rec.LeaseUntil.After(res.Now)
	if rec.State != store.StateReleased && !expired {
		return "", false
	}
	return g.fingerprintUnder(op, rec)
}

// WouldExecute reports whether a request for record id would be a new
// execution, while the breaker refuses those: no record, a released one,
// or one whose lease ran out. A completed or held record, or a live
// claim, is answered as usual (replays are still served). When the store
// cannot say, the request goes the usual way and the claim decides.
func (g *Gate) WouldExecute(ctx context.Context, id string) bool {
	began := time.Now()
	rec, err := g.Store.Get(context.WithoutCancel(ctx), id)
	g.Metrics.ObserveStore("get", began, err)
	switch {
	case err != nil:
		return false
	case rec == nil, rec.State == store.StateReleased:
		return true
	}
	return false
}

// expiredPolicy says what a claim does with a record whose lease ran out:
// the gateway that held it died mid-call, so the outcome is unknown.
func expiredPolicy(onUnknown config.OnUnknown) store.Expired {
	if onUnknown == config.OnUnknownRelease {
		return store.ExpiredRelease
	}
	return store.ExpiredHold
}

// StoreFailed is what becomes of a request whose claim the store could
// not make (err): forwarded unguarded (forward, under fail_open or on a
// route that observes), or refused with the problem it returns.
func (g *Gate) StoreFailed(op *Operation, err error) (out Outcome, forward bool, p problem.Problem) {
	rt := op.Route
	out = Outcome{Name: OutcomeStoreError, Note: err.Error()}
	g.Metrics.StoreErrors.WithLabelValues(rt.Name, "claim").Inc()
	if errors.Is(err, store.ErrReplicasShort) {
		// wait_strict: the store is up, a replica is not; forwarding
		// unguarded would defeat the mode on every route.
		return out, false, problem.StoreDown.With("too few replicas acknowledged the claim (wait_strict); the request was not forwarded", rt.Name)
	}
	if errors.Is(err, ErrKeptUnwritten) && !rt.Observing() {
		// Forwarding it, even under fail_open, would execute the
		// operation a second time.
		return out, false, problem.StoreDown.With("the store has no room yet for this key's result, which the gateway keeps; the request was not forwarded", rt.Name)
	}
	if rt.OnStoreError == config.OnStoreErrorFailOpen || rt.Observing() {
		out.Note = "forwarded unguarded: " + out.Note
		return out, true, problem.Problem{}
	}
	return out, false, problem.StoreDown.With("the idempotency store cannot be reached; the request was not forwarded", rt.Name)
}
