package caddymodule

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
)

// claim takes the right to execute the request's key, or finds the record
// that answers it (g.rec, with the store's clock in g.now). It returns the
// claim the request now holds, or nil when the record answers it.
//
// A released record, or one whose lease ran out, that was made under an
// earlier fingerprint rule is taken over only with the fingerprint that
// rule gives this request: a reload that changed the rule never turns a
// genuine retry into a mismatch, nor a different payload into a takeover.
func (h *Handler) claim(ctx context.Context, g *guarded, method string, in *keying.Input, fp string) (*store.Claim, error) {
	req := h.claimRequest(g, fp, g.rt.fpRule)
	res, err := h.claimOnce(ctx, req)
	if err == nil {
		if oldFP, ok := h.claimableUnderOldRule(res, g.rt, method, in); ok {
			req = h.claimRequest(g, oldFP, res.Record.FingerprintRule)
			res, err = h.claimOnce(ctx, req)
		}
	}
	if err != nil {
		return nil, err
	}
	g.rec, g.now = res.Record, res.Now
	return res.Claim, nil
}

// claimRequest asks for the request's key under a fingerprint and the
// rule that made it, with a fresh token.
func (h *Handler) claimRequest(g *guarded, fp, fpRule string) store.ClaimRequest {
	return store.ClaimRequest{
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
		Check:           g.check,
	}
}

// claimOnce runs one claim. The claim must not be abandoned halfway
// because the client hung up: a claim that landed but whose answer was
// lost would sit until its lease ran out. The store bounds every call by
// op_timeout itself.
func (h *Handler) claimOnce(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	began := time.Now()
	res, err := h.store.Claim(context.WithoutCancel(ctx), req)
	h.metrics.observeStore("claim", began, err)
	if err != nil {
		// The script may have run even though its answer was lost: give
		// the claim back so it does not wait out its lease as "unknown".
		h.enter()
		go h.releaseLost(store.NewClaim(h.store, req, time.Time{}, req.TTL))
		return res, fmt.Errorf("claiming key %s: %w", req.ID, err)
	}
	return res, nil
}

// releaseLost gives back a claim whose answer may have been lost.
// It runs in the background and leaves the handler when done.
func (h *Handler) releaseLost(c *store.Claim) {
	defer h.leave()
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
func (h *Handler) claimableUnderOldRule(res store.ClaimResult, rt *route, method string, in *keying.Input) (oldFP string, ok bool) {
	rec := res.Record
	if res.Claimed || rec == nil || rec.FingerprintRule == rt.fpRule {
		return "", false
	}
	expired := rec.State == store.StateInFlight && !rec.LeaseUntil.After(res.Now)
	if rec.State != store.StateReleased && !expired {
		return "", false
	}
	return h.fingerprintUnder(rec, method, in)
}

// expiredPolicy says what a claim does with a record whose lease ran out:
// the gateway that held it died mid-call, so the outcome is unknown.
func expiredPolicy(onUnknown config.OnUnknown) store.Expired {
	if onUnknown == config.OnUnknownRelease {
		return store.ExpiredRelease
	}
	return store.ExpiredHold
}
