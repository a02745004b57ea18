package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/redrive"
	"github.com/idemgate/idemgate/sealed"
	"github.com/idemgate/idemgate/store"
)

// A re-drive (POST /idempotency/records/{id}/run, the console's Run now)
// runs a held or released operation once more, from the request its
// record kept (keep_request), through the same guarded path as a
// client's request: the store claims the record under a new fenced token
// (store.Redrive: only where the operation is known not done), the
// request goes to the rest of the route's handler chain, and its outcome
// is recorded as any execution's, so the client's later retries replay
// it.
//
// The rest of the chain is reverse_proxy and whatever the site puts
// after the idempotency handler: the handler finds it in its config (see
// package redrive), so a re-drive works right after a start or a reload.
// The handlers before the idempotency handler (authentication,
// request_body, request_header) are not run again: the operator is
// authenticated by the admin endpoint or the console, and the caller's
// credentials were never kept; redrive_headers give the upstream the
// gateway's own.

// provisionRedrive lets the operator API reach this handler through its
// routes, to run a re-drive on an operator's word, and keeps the HTTP app
// whose routes hold the chain the re-drive goes through.
func (h *Handler) provisionRedrive(ctx caddy.Context) {
	h.redriveTo = redrive.NewTo(ctx)
}

// remember keeps the chain after this handler for the route's re-drives
// (keep_request routes), from the first request that brings it: for a
// handler where the config lookup does not find it.
func (h *Handler) remember(rt *route, next caddyhttp.Handler, r *http.Request) {
	live := h.runtime(rt)
	if !rt.KeepRequest || live.chain.Load() != nil {
		return
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	live.chain.Store(&redrive.Chain{Next: next, Server: srv})
}

// keep seals the request for the record's re-drive, when its route keeps
// requests; nil otherwise. A request that cannot be sealed is not kept
// (the record then cannot be re-driven, and says so).
func (h *Handler) keep(rt *route, id string, r *http.Request, key string, body []byte) []byte {
	if !rt.KeepRequest || h.seal == nil {
		return nil
	}
	kr := &sealed.Request{
		Method: r.Method, Target: r.URL.RequestURI(), Host: r.Host,
		Header: sealed.Headers(rt.KeepHeaders, r.Header), Body: body, Key: key,
	}
	out, err := h.seal.Seal(id, kr)
	if err != nil {
		return nil
	}
	return out
}

// redrive claims rec for the run and forwards its kept request once
// through the route's chain (guard.Gate.ForwardOnce, as a client's execute).
func (h *Handler) redrive(ctx context.Context, rt *route, rec *store.Record, act store.Action) (*store.Record, int, error) {
	refuse := func(result string, rec *store.Record, err error) (*store.Record, int, error) {
		h.gate.Metrics.Redrives.WithLabelValues(rt.Name, result).Inc()
		return rec, 0, err
	}
	h.use.Enter()
	defer h.use.Leave()
	if err := store.RedriveRefusal(rec, time.Now()); err != nil {
		return refuse("refused", rec, err)
	}
	ch := h.redriveChain(rt)
	if ch == nil {
		return refuse("refused", rec, operator.ErrNoChain)
	}
	if h.seal == nil { // keep_request routes need a configured secret: never here
		return refuse("refused", rec, fmt.Errorf("%w: record %s: no secret is configured to open its kept request", store.ErrConflict, rec.ID))
	}
	kr, err := h.seal.Open(rec.ID, rec.Request)
	if err != nil {
		return refuse("refused", rec, fmt.Errorf("%w: record %s: %v", store.ErrConflict, rec.ID, err))
	}
	r, sink, err := redrive.Request(kr, rt.RedriveHeader, ch.Server)
	if err != nil {
		return refuse("refused", rec, fmt.Errorf("%w: record %s: the kept request target does not parse", store.ErrConflict, rec.ID))
	}
	// The breaker applies to every execution, whoever starts it: while
	// it is open the run waits like a client's new key; after the
	// cool-down it may be the probe.
	op := &guard.Operation{Route: rt, ID: rec.ID, Key: kr.Key}
	var adm guard.Admission
	if b := h.runtime(rt).breaker; b != nil {
		adm.Breaker = b
	}
	if adm.Admit(); adm.Refused > 0 {
		return refuse("refused", rec, &operator.BreakerOpenError{Route: rt.Name, Wait: adm.Refused})
	}
	req := store.RedriveRequest{ID: rec.ID, Token: store.NewToken(), Lease: rt.LockLease, HoldTTL: rt.HoldTTL, Act: act}
	began := time.Now()
	claimed, err := h.gate.Store.Redrive(context.WithoutCancel(ctx), req)
	h.gate.Metrics.ObserveStore("redrive", began, err)
	if err != nil {
		adm.Cancel()
	}
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalidArgument):
		return refuse("refused", claimed, err)
	case err != nil:
		return refuse("error", nil, err)
	}
	c := store.ClaimFor(h.gate.Store, claimed, req, rt.TTL)

	body, _, err := exchange.ReadBody(r, max(rt.MaxBody, int64(len(kr.Body))), 0)
	defer body.Release()
	if err != nil {
		_, _ = c.Release(context.Background())
		adm.Cancel()
		return refuse("error", nil, fmt.Errorf("record %s: reading the kept request: %w", rec.ID, err))
	}
	out, result, _, _ := h.gate.ForwardOnce(op, &adm, c, sink, r, ch.Next.ServeHTTP, &body)
	h.gate.Metrics.Redrives.WithLabelValues(rt.Name, result).Inc()
	h.gate.Logger.Info("operation run again by an operator",
		zap.String("route", rt.Name), zap.String("record_id", rec.ID), zap.String("owner", rt.Owner),
		zap.String("actor", act.Actor), zap.Int("status", out.Status), zap.String("result", result))
	after, err := h.gate.Store.Get(context.WithoutCancel(ctx), rec.ID)
	if err != nil || after == nil {
		after = claimed
	}
	return after, out.Status, nil
}

// redriveChain is the chain a re-drive of rt goes through: the one found
// in the config (kept once found), else the one rt's requests brought
// (nil: neither).
func (h *Handler) redriveChain(rt *route) *redrive.Chain {
	if h.redriveTo != nil {
		if ch := h.redriveTo.Find(h); ch != nil {
			return ch
		}
	}
	return h.runtime(rt).chain.Load()
}
