package caddymodule

import (
	"context"
	"math"
	"net/http"
	"sync"
	"time"

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
// It lives as long as the process, across reloads that keep its rule.
type breaker struct {
	rule  config.BreakerRule
	gauge prometheus.Gauge
	now   func() time.Time

	mu       sync.Mutex
	streak   int       // consecutive failed outcomes while closed
	openedAt time.Time // zero: closed
	probing  bool      // the probe is out
}

// breakers are the process's breakers by route name: a reload that keeps
// a route's rule keeps its breaker (and its state).
var breakers = struct {
	sync.Mutex
	m map[string]*breaker
}{m: map[string]*breaker{}}

// breakerFor returns route's breaker under rule (nil: the route has none).
func breakerFor(route string, rule *config.BreakerRule, gauge *prometheus.GaugeVec) *breaker {
	breakers.Lock()
	defer breakers.Unlock()
	if rule == nil {
		if _, ok := breakers.m[route]; ok {
			delete(breakers.m, route)
			gauge.DeleteLabelValues(route)
		}
		return nil
	}
	if b, ok := breakers.m[route]; ok && b.rule == *rule {
		return b
	}
	b := &breaker{rule: *rule, gauge: gauge.WithLabelValues(route), now: time.Now}
	b.gauge.Set(0)
	breakers.m[route] = b
	return b
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
		b.gauge.Set(0)
	case !b.openedAt.IsZero():
		// A call that started before the breaker opened: the probe
		// decides, not it.
	case !failed:
		b.streak = 0
	default:
		if b.streak++; b.streak >= b.rule.Failures {
			b.openedAt, b.streak = b.now(), 0
			b.gauge.Set(1)
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
	h.metrics.observeStore("get", began, err)
	switch {
	case err != nil:
		return false
	case rec == nil, rec.State == store.StateReleased:
		return true
	}
	return false
}

// breakerOpen answers a new execution that the route's open breaker
// refuses: 503 with the seconds until the breaker lets a probe through.
func (h *Handler) breakerOpen(g *guarded, w http.ResponseWriter, wait time.Duration) error {
	g.outcome = outcomeBreakerOpen
	p := probBreakerOpen.with("the upstream of route "+g.rt.Name+" failed repeatedly; new executions are paused and nothing was forwarded", g.rt.Name)
	p.retryAfter = retryAfter(wait)
	return h.problem(g, w, p)
}
