package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/breaker"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// breakers are the process's breakers (see breaker.Owner). Process-wide
// by nature, as the store pool is (see storepool.Default): a breaker outlives the
// config reloads that keep its route, and only a pool outside any one
// config can hand it from the old handler to the new one, as Caddy's
// reverse_proxy keeps its upstreams' state. Its keys name the server and
// the handler's place in it, so two configs loaded side by side (tests,
// two sites) never share one.
var breakers = breaker.NewOwner()

// wouldExecute reports whether a request for record id would be a new
// execution, while the breaker refuses those: no record, a released one,
// or one whose lease ran out. A completed or held record, or a live
// claim, is answered as usual (replays are still served). When the store
// cannot say, the request goes the usual way and the claim decides.
func (h *Handler) wouldExecute(ctx context.Context, id string) bool {
	began := time.Now()
	rec, err := h.store.Get(context.WithoutCancel(ctx), id)
	h.metrics.ObserveStore("get", began, err)
	switch {
	case err != nil:
		return false
	case rec == nil, rec.State == store.StateReleased:
		return true
	}
	return false
}

// errBreakerOpen is a waiting duplicate's claim refused by the route's
// breaker (see readmit).
var errBreakerOpen = errors.New("the route's breaker refuses new executions")

// readmit asks the route's breaker again for a request that waited for
// the first request with its key and may now go on to execute: the
// breaker may have opened while it waited. It reports whether the breaker
// refuses it (g.refused says for how long). A request that holds the
// probe keeps it.
func (h *Handler) readmit(g *guarded) bool {
	if g.brk == nil || g.probe {
		return false
	}
	g.probe, g.refused = g.brk.Admit()
	return g.refused > 0
}

// giveBackProbe returns the probe of a request that turned out not to
// execute yet (it waits on).
func (h *Handler) giveBackProbe(g *guarded) {
	g.brk.Cancel(g.probe)
	g.probe = false
}

// breakerOpen answers a new execution that the route's open breaker
// refuses: 503 with the seconds until the breaker lets a probe through.
func (h *Handler) breakerOpen(g *guarded, w http.ResponseWriter) error {
	g.outcome = outcomeBreakerOpen
	p := problem.BreakerOpen.With("the upstream of route "+g.rt.Name+" failed repeatedly; new executions are paused and nothing was forwarded", g.rt.Name)
	p.RetryAfter = breaker.RetryAfter(g.refused)
	return h.problem(g, w, p)
}
