// Package breaker is the circuit breaker of a route (retry.breaker), kept
// by each gateway for itself, and the owner that hands a route's breaker
// from one config to the next across reloads.
package breaker

import (
	"fmt"
	"math"
	"sync"
	"time"
	"weak"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
)

// Breaker is one route's circuit breaker (retry.breaker), kept by each
// gateway for itself: after Failures consecutive executions that ended
// "not done" or unknown, new executions are refused for CoolDown,
// counted from the opening; then one probe is let through, whose success
// closes the breaker and whose failure opens it for a full cool-down
// again. Replays and other answers from a record never pass through it.
// It belongs to one route of one handler and outlives reloads that keep
// both (see Owner).
type Breaker struct {
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
func newBreaker(rule config.BreakerRule, gauge prometheus.Gauge) *Breaker {
	gauge.Add(0) // the route's series shows from the start
	return &Breaker{rule: rule, gauge: gauge, now: time.Now}
}

// Destruct takes the breaker out of the gauge when the last config that
// had it is gone. Requests of that config that are still running go on
// reporting to it, uncounted.
func (b *Breaker) Destruct() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.openedAt.IsZero() {
		b.gauge.Dec()
	}
	b.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "idemgate_breaker_gone"}) // registered nowhere
	return nil
}

// Owner shares each route's breaker across config reloads, as
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
type Owner struct {
	pool *caddy.UsagePool // *Breaker by breaker key

	mu     sync.Mutex
	server weak.Pointer[caddyhttp.Server] // the server whose handlers are being provisioned
	seen   map[string]int                 // route names in server's handlers so far
}

// NewOwner is an owner with no breakers yet.
func NewOwner() *Owner {
	return &Owner{pool: caddy.NewUsagePool()}
}

// Load returns the breaker of route name under rule for a handler being
// provisioned in ctx, and its key in the pool, which the handler gives
// back with Unload when it is cleaned up. Caddy provisions one config at
// a time, a server's handlers in their order in the config: the count of
// a route name within the server starts anew with each server.
func (o *Owner) Load(ctx caddy.Context, name string, rule config.BreakerRule, gauge *prometheus.GaugeVec) (*Breaker, string, error) {
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
	return v.(*Breaker), key, nil
}

// Unload gives back the handler's references to its breakers.
func (o *Owner) Unload(keys []string) {
	for _, k := range keys {
		_, _ = o.pool.Delete(k)
	}
}

// Admit asks whether a new execution may be forwarded now. While the
// breaker is open it may not: wait is how long until it may be tried
// again. When the cool-down is over the first caller gets the probe
// (probe true) and must report it with Done or Cancel.
func (b *Breaker) Admit() (probe bool, wait time.Duration) {
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

// Cancel gives the probe back: its request did not execute (a replay, a
// conflict, a store failure).
func (b *Breaker) Cancel(probe bool) {
	if b == nil || !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// Done counts one execution's outcome: failed when the upstream said
// "not done" or the outcome is unknown.
func (b *Breaker) Done(probe, failed bool) {
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

// RetryAfter is wait in whole seconds, rounded up, at least 1.
func RetryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

// SetClock sets the clock the breaker reads its cool-down by (time.Now
// by default): for tests that end a cool-down without waiting it out.
func (b *Breaker) SetClock(now func() time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = now
}
