package caddymodule

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/verify"
)

// LiveStores returns the record stores of every idempotency handler in
// the running config, in a stable order, for the operator service
// (package operator) behind the admin API and the operator console.
func LiveStores() []operator.LiveStore { return stores.exported() }

// LiveStore returns h's own record store as the operator service sees it,
// with only h's routes: for an operator view of one handler.
func (h *Handler) LiveStore() operator.LiveStore {
	o := &storeOwner{uses: map[uint64]*storeUse{}}
	o.track(&storeUse{key: h.use.key, engine: h.store, routes: h.routes})
	return o.exported()[0]
}

// exported is o's live stores as the operator service's LiveStores.
func (o *storeOwner) exported() []operator.LiveStore {
	snap := o.live()
	out := make([]operator.LiveStore, len(snap))
	for i, s := range snap {
		out[i] = operator.LiveStore{Tag: s.tag, Store: s.store, Routes: make(map[string]config.Resolved, len(s.routes)), Actions: liveActions(s.routes)}
		for name, rt := range s.routes {
			out[i].Routes[name] = rt.Resolved
		}
	}
	return out
}

// liveActions runs the operator service's checks and re-drives with the
// live verifiers and handlers of a store's routes, by name.
type liveActions map[string]*route

// Verify runs an operator's check of rec with the live verifier of the
// record's route (see verify.Verifier.Verify); operator.ErrNoVerify when the
// route has no verify rule in the running config.
func (routes liveActions) Verify(_ context.Context, rec *store.Record, act store.Action) (*store.Record, string, error) {
	if err := verify.Verifiable(rec); err != nil {
		return rec, "", err
	}
	rt := routes[rec.Route]
	var v *verify.Verifier
	if rt != nil && rt.Verify != nil {
		v = rt.verifier.Load()
	}
	if v == nil {
		return rec, "", fmt.Errorf("%w: route %s", operator.ErrNoVerify, rec.Route)
	}
	return v.Verify(&rt.Resolved, rec, act)
}

// Run re-drives rec through its route's handler (see Handler.redrive).
func (routes liveActions) Run(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, int, error) {
	rt := routes[rec.Route]
	var h *Handler
	if rt != nil {
		h = rt.handler.Load()
	}
	if h == nil || !rt.KeepRequest {
		processMetrics.redrives.WithLabelValues(rec.Route, "refused").Inc()
		return rec, 0, fmt.Errorf("%w: route %s is not configured with keep_request on this gateway", store.ErrConflict, rec.Route)
	}
	return h.redrive(ctx, rt, rec, act)
}
