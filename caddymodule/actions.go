package caddymodule

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/storepool"
	"github.com/idemgate/idemgate/verify"
)

// StoreModule is a record store engine as a Caddy guest module in the
// namespace idempotency.stores (see storepool.Module).
type StoreModule = storepool.Module

// LiveStore returns h's own record store as the operator service sees it,
// with only h's routes: for an operator view of one handler.
func (h *Handler) LiveStore() operator.LiveStore { return h.use.Live() }

// operatorActions runs the operator service's checks and re-drives of
// records of h's routes: the handler's side of operator.Actions.
type operatorActions struct{ h *Handler }

// CheckOutcome runs an operator's check of rec, asking the upstream
// whether the operation happened, with the handler's verifier (see
// verify.Verifier.CheckOutcome); operator.ErrNoVerify when the record's
// route has no verify rule in the handler's config.
func (a operatorActions) CheckOutcome(_ context.Context, rec *store.Record, act store.Action) (*store.Record, string, error) {
	if err := verify.Verifiable(rec); err != nil {
		return rec, "", err
	}
	rt := a.h.routeNamed(rec.Route)
	if rt == nil || rt.Verify == nil || a.h.verifier == nil {
		return rec, "", fmt.Errorf("%w: route %s", operator.ErrNoVerify, rec.Route)
	}
	return a.h.verifier.CheckOutcome(&rt.Resolved, rec, act)
}

// Run re-drives rec through the handler (see Handler.redrive).
func (a operatorActions) Run(ctx context.Context, rec *store.Record, act store.Action) (*store.Record, int, error) {
	rt := a.h.routeNamed(rec.Route)
	if rt == nil || !rt.KeepRequest {
		a.h.metrics.Redrives.WithLabelValues(rec.Route, "refused").Inc()
		return rec, 0, fmt.Errorf("%w: route %s is not configured with keep_request on this gateway", store.ErrConflict, rec.Route)
	}
	return a.h.redrive(ctx, rt, rec, act)
}

// routeNamed returns h's route of that name, or nil.
func (h *Handler) routeNamed(name string) *route {
	for _, rt := range h.routes {
		if rt.Name == name {
			return rt
		}
	}
	return nil
}
