package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"
	"weak"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/store"
)

// breaker is one route's circuit breaker (retry.breaker), kept by each
// gateway for itself: after Failures consecutive executions that ended
// "not done" or unknown, new executions are refused for CoolDown,
// counted from the opening; then one probe is let through, whose success
// closes the breaker and whose failure opens it for a full cool-down
// again. Replays and other answers from a record never pass through it.
// It belongs to one route of one handler and outlives reloads that keep
// both (see breakerOwner).
type breaker struct {
	rule config.BreakerRule
	// gauge counts the open breakers of routes with this name (a
	// gateway with two sites may have two): this one adds 1 while open.
	gauge prometheus.Gauge
	now   func() time.Time

	mu       sync.Mutex
	streak   int       // consecutive failed outcomes while closed
	openedAt time.Time // zero: closed
	probing  bool      // the probe is out
}

// newBreaker is a closed breaker under rule, counted in gauge.
func newBreaker(rule config.BreakerRule, gauge prometheus.Gauge) *breaker {
	gauge.Add(0) // the route's series shows from the start
	return &breaker{rule: rule, gauge: gauge, now: time.Now}
}

// Destruct takes the breaker out of the gauge when the last config that
// had it is gone. Requests of that config that are still running go on
// reporting to it, uncounted.
func (b *breaker) Destruct() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.openedAt.IsZero() {
		b.gauge.Dec()
	}
	b.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "idemgate_breaker_gone"}) // registered nowhere
	return nil
}

// breakers are the process's breakers. Process-wide by nature, as the
// store pool is (see stores): a breaker outlives the config reloads that
// keep its route, and only a pool outside any one config can hand it from
// the old handler to the new one. Its keys name the server and the
// handler's place in it, so two configs loaded side by side (tests, two
// sites) never share one.
var breakers = newBreakerOwner()

// breakerOwner shares each route's breaker across config reloads, as
// the store pool shares stores: a reload provisions the new config before it
// cleans up the old one, so a breaker the new config keeps goes 1 → 2 → 1
// references in the pool and lives on, open or not.
//
// A breaker is one route of one handler. "The same handler" after a reload
// is the handler in the same place: the same Caddy server (the listener
// addresses a Caddyfile site block makes into srv0, srv1, ...), the n-th
// handler in that server with a route of that name, and the same breaker
// rule. Two sites, or two handlers in one site, with a route of the same
// name have two breakers, whatever store they use; a reload that changes
// a route's breaker rule starts it closed.
type breakerOwner struct {
	pool *caddy.UsagePool // *breaker by breaker key

	mu     sync.Mutex
	server weak.Pointer[caddyhttp.Server] // the server whose handlers are being provisioned
	seen   map[string]int                 // route names in server's handlers so far
}

func newBreakerOwner() *breakerOwner {
	return &breakerOwner{pool: caddy.NewUsagePool()}
}

// load returns the breaker of route name under rule for a handler being
// provisioned in ctx, and its key in the pool, which the handler gives
// back with unload when it is cleaned up. Caddy provisions one config at
// a time, a server's handlers in their order in the config: the count of
// a route name within the server starts anew with each server.
func (o *breakerOwner) load(ctx caddy.Context, name string, rule config.BreakerRule, gauge *prometheus.GaugeVec) (*breaker, string, error) {
	srv, _ := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	o.mu.Lock()
	if at := weak.Make(srv); at != o.server || o.seen == nil {
		o.server, o.seen = at, map[string]int{}
	}
	nth := o.seen[name]
	o.seen[name]++
	o.mu.Unlock()
	serverName := ""
	if srv != nil {
		serverName = srv.Name()
	}
	key := fmt.Sprintf("%q/%q#%d %d/%s", serverName, name, nth, rule.Failures, rule.CoolDown)
	v, _, err := o.pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newBreaker(rule, gauge.WithLabelValues(name)), nil
	})
	if err != nil {
		return nil, "", err
	}
	return v.(*breaker), key, nil
}

// unload gives back the handler's references to its breakers.
func (o *breakerOwner) unload(keys []string) {
	for _, k := range keys {
		_, _ = o.pool.Delete(k)
	}
}

// admit asks whether a new execution may be forwarded now. While the
// breaker is open it may not: wait is how long until it may be tried
// again. When the cool-down is over the first caller gets the probe
// (probe true) and must report it with done or cancel.
func (b *breaker) admit() (probe bool, wait time.Duration) {
	if b == nil {
		return false, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openedAt.IsZero() {
		return false, 0
	}
	if left := b.openedAt.Add(b.rule.CoolDown).Sub(b.now()); left > 0 {
		return false, left
	}
	if b.probing {
		return false, time.Second // the probe's outcome decides
	}
	b.probing = true
	return true, 0
}

// cancel gives the probe back: its request did not execute (a replay, a
// conflict, a store failure).
func (b *breaker) cancel(probe bool) {
	if b == nil || !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// done counts one execution's outcome: failed when the upstream said
// "not done" or the outcome is unknown.
func (b *breaker) done(probe, failed bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case probe:
		b.probing = false
		if failed {
			b.openedAt = b.now() // a full cool-down again
			return
		}
		b.openedAt, b.streak = time.Time{}, 0
		b.gauge.Dec()
	case !b.openedAt.IsZero():
		// A call that started before the breaker opened: the probe
		// decides, not it.
	case !failed:
		b.streak = 0
	default:
		if b.streak++; b.streak >= b.rule.Failures {
			b.openedAt, b.streak = b.now(), 0
			b.gauge.Inc()
		}
	}
}

// retryAfter is wait in whole seconds, rounded up, at least 1.
func retryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

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
	g.probe, g.refused = g.brk.admit()
	return g.refused > 0
}

// giveBackProbe returns the probe of a request that turned out not to
// execute yet (it waits on).
func (h *Handler) giveBackProbe(g *guarded) {
	g.brk.cancel(g.probe)
	g.probe = false
}

// breakerOpen answers a new execution that the route's open breaker
// refuses: 503 with the seconds until the breaker lets a probe through.
func (h *Handler) breakerOpen(g *guarded, w http.ResponseWriter) error {
	g.outcome = outcomeBreakerOpen
	p := probBreakerOpen.with("the upstream of route "+g.rt.Name+" failed repeatedly; new executions are paused and nothing was forwarded", g.rt.Name)
	p.retryAfter = retryAfter(g.refused)
	return h.problem(g, w, p)
}
