package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/unrecorded"
)

// claim takes the right to execute the request's key, or finds the record
// that answers it (g.rec, with the store's clock in g.now). It returns the
// claim the request now holds, or nil when the record answers it.
//
// A record held as outcome unknown, found by a retry on a route with a
// verify rule, is settled with the upstream first (Verifier.Settle): a
// verified result answers the retry, a record found not applied (released)
// or gone is claimed again, and one still held answers 409. On a route
// whose duplicates wait, a duplicate of a request in flight waits for it
// (see wait.go), watching the record from before its claim, while a
// waiting place is free.
func (h *Handler) claim(ctx context.Context, g *guarded) (*store.Claim, error) {
	var wt *waiter
	if g.rt.wait {
		wt = h.watch(g.rt, g.id)
		defer wt.stop()
	}
	c, err := h.claimOrSettle(ctx, g)
	if err != nil || c != nil || !h.shouldWait(wt, g) {
		return c, err
	}
	leave, ok := h.enterWait(g)
	if !ok {
		return nil, nil // answered as without waiting
	}
	defer leave()
	return h.await(ctx, g, wt)
}

// claimOrSettle claims the key, or settles the held record found with
// the upstream (settleHeld).
func (h *Handler) claimOrSettle(ctx context.Context, g *guarded) (*store.Claim, error) {
	c, err := h.claimKey(ctx, g)
	if err != nil || c != nil {
		return c, err
	}
	return h.settleHeld(ctx, g)
}

// settleHeld asks the Verifier to settle g.rec when it is held as outcome
// unknown on a route with a verify rule and the request is its retry:
// nil when the record answers the request (g.rec, completed or still
// held), or the claim of a record the check released (or that is gone).
func (h *Handler) settleHeld(ctx context.Context, g *guarded) (*store.Claim, error) {
	rec := g.rec
	if rec == nil || rec.Class() != store.StateUnknown || rec.Reason == store.ReasonSamePayload || g.rt.Verify == nil || !h.sameFingerprint(g, rec) {
		return nil, nil
	}
	after, note := h.verifier.Settle(ctx, &g.rt.Resolved, rec, g.check)
	if note != "" {
		g.note = note
	}
	if after != nil && after.State != store.StateReleased {
		g.rec = after
		return nil, nil
	}
	return h.claimKey(ctx, g)
}

// claimKey asks the store for the request's key once (twice when the
// record was made under an earlier fingerprint rule).
//
// A released record, or one whose lease ran out, that was made under an
// earlier fingerprint rule is taken over only with the fingerprint that
// rule gives this request: a reload that changed the rule never turns a
// genuine retry into a mismatch, nor a different payload into a takeover.
func (h *Handler) claimKey(ctx context.Context, g *guarded) (*store.Claim, error) {
	if kc := h.kept.Find(unrecorded.Key{Engine: h.store, ID: g.id}); kc != nil {
		// This gateway keeps the key's result, which the store refused
		// for want of room: written first, so the retry replays the
		// answer its client got, or fails closed while it cannot be.
		if _, err := h.writeKept(kc, zap.String("tried_by", "a retry of its key")); err != nil {
			return nil, fmt.Errorf("%w: %w", errKeptUnwritten, err)
		}
	}
	req := h.claimRequest(g, g.fp, g.rt.fpRule)
	res, err := h.claimOnce(ctx, req)
	if err == nil {
		if oldFP, ok := h.claimableUnderOldRule(res, g); ok {
			req = h.claimRequest(g, oldFP, res.Record.FingerprintRule)
			res, err = h.claimOnce(ctx, req)
		}
	}
	if err != nil {
		return nil, err
	}
	g.rec, g.now = res.Record, res.Now
	if res.Tombstone != nil || res.Twin != nil {
		h.noteRetention(g, res)
	}
	return res.Claim, nil
}

// claimRequest asks for the request's key under a fingerprint and the
// rule that made it, with a fresh token.
func (h *Handler) claimRequest(g *guarded, fp, fpRule string) store.ClaimRequest {
	req := store.ClaimRequest{
		ID:              g.id,
		Route:           g.rt.Name,
		Operation:       g.rt.Operation,
		Fingerprint:     fp,
		FingerprintRule: fpRule,
		Token:           store.NewToken(),
		Lease:           g.rt.LockLease,
		HoldTTL:         g.rt.HoldTTL,
		TTL:             g.rt.TTL,
		OnExpired:       expiredPolicy(g.rt.OnUnknownOutcome),
		MaxExecutions:   int64(g.rt.MaxExecutions),
		Check:           g.check,
		Request:         g.sealed,
		Tombstone:       g.rt.TombstoneTTL,
		AfterExpiry:     store.AfterExpiry(g.rt.AfterExpiry),
	}
	if g.payload != "" {
		g.samePayloadOptions(&req)
	}
	if g.call != nil {
		req.Call = keptCall(g)
	}
	return req
}

// claimOnce runs one claim. The claim must not be abandoned halfway
// because the client hung up: a claim that landed but whose answer was
// lost would sit until its lease ran out. The store bounds every call by
// op_timeout itself.
func (h *Handler) claimOnce(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	began := time.Now()
	res, err := h.store.Claim(context.WithoutCancel(ctx), req)
	h.metrics.ObserveStore("claim", began, err)
	if err != nil {
		// The script may have run even though its answer was lost: give
		// the claim back so it does not wait out its lease as "unknown".
		h.use.Enter()
		go h.releaseLost(store.NewClaim(h.store, req, time.Time{}, req.TTL))
		return res, fmt.Errorf("claiming key %s: %w", req.ID, err)
	}
	return res, nil
}

// releaseLost gives back a claim whose answer may have been lost.
// It runs in the background and leaves the handler when done.
func (h *Handler) releaseLost(c *store.Claim) {
	defer h.use.Leave()
	ctx, cancel := context.WithTimeout(context.Background(), h.opTimeout())
	defer cancel()
	_, _ = c.Release(ctx)
}

// claimableUnderOldRule returns the fingerprint to claim with when an
// unclaimed record could be taken over (released, or its lease ran out)
// but was made under an earlier fingerprint rule that gives this request
// the record's fingerprint. Lease expiry is judged as the claim script
// judges it, by the store's clock the script ran at (lease_until <= now),
// never by this gateway's clock.
func (h *Handler) claimableUnderOldRule(res store.ClaimResult, g *guarded) (oldFP string, ok bool) {
	rec := res.Record
	if res.Claimed || rec == nil || rec.FingerprintRule == g.rt.fpRule {
		return "", false
	}
	expired := rec.State == store.StateInFlight && !rec.LeaseUntil.After(res.Now)
	if rec.State != store.StateReleased && !expired {
		return "", false
	}
	return h.fingerprintUnder(g, rec)
}

// expiredPolicy says what a claim does with a record whose lease ran out:
// the gateway that held it died mid-call, so the outcome is unknown.
func expiredPolicy(onUnknown config.OnUnknown) store.Expired {
	if onUnknown == config.OnUnknownRelease {
		return store.ExpiredRelease
	}
	return store.ExpiredHold
}

// storeFailed handles a store that could not be reached at claim time.
func (h *Handler) storeFailed(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body, err error) error {
	g.outcome = outcomeStoreError
	g.note = err.Error()
	h.metrics.StoreErrors.WithLabelValues(g.rt.Name, "claim").Inc()
	if errors.Is(err, store.ErrReplicasShort) {
		// wait_strict: the store is up, a replica is not; forwarding
		// unguarded would defeat the mode on every route.
		return h.problem(g, w, problem.StoreDown.With("too few replicas acknowledged the claim (wait_strict); the request was not forwarded", g.rt.Name))
	}
	if errors.Is(err, errKeptUnwritten) && !g.rt.observing() {
		// Forwarding it, even under fail_open, would execute the
		// operation a second time.
		return h.problem(g, w, problem.StoreDown.With("the store has no room yet for this key's result, which the gateway keeps; the request was not forwarded", g.rt.Name))
	}
	if g.rt.OnStoreError == config.OnStoreErrorFailOpen || g.rt.observing() {
		g.note = "forwarded unguarded: " + g.note
		body.Forward(r)
		return next.ServeHTTP(w, r)
	}
	return h.problem(g, w, problem.StoreDown.With("the idempotency store cannot be reached; the request was not forwarded", g.rt.Name))
}
