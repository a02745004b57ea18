package caddymodule

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/store"
)

// outcomeObserved: a route in observe mode forwarded a request that
// enforce would have answered itself (see guarded.would).
const outcomeObserved = "observed"

// What enforce would have done with a request that observe forwarded: the
// would label of idemgate_observed_total and of the decision log line.
const (
	wouldReplay     = "replay"      // a completed record with the same payload: replayed
	wouldConflict   = "conflict"    // the first request with the key still in flight: 409
	wouldMismatch   = "mismatch"    // the key used before with another payload: 422
	wouldUnknown    = "unknown"     // the key's outcome held as unknown: 409
	wouldMissingKey = "missing_key" // no key could be derived and require_key: 400
	wouldInvalid    = "invalid"     // a malformed key or a body a key or fingerprint rule cannot read: 400
)

// observe forwards a request that enforce would have answered itself
// (would says how), unguarded: nothing is claimed or recorded for it, so
// no record made while observing carries the payload of a forwarded
// duplicate, and switching the route to enforce replays what the first
// request recorded. The upstream gets the request's key (g.key, "" when
// none) as it would under enforce.
func (h *Handler) observe(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body, would string) error {
	g.outcome, g.would = outcomeObserved, would
	h.metrics.Observed.WithLabelValues(g.rt.Name, would).Inc()
	observedCounts.add(g.rt.Name, would)
	r = r.WithContext(r.Context()) // a copy: Caddy's logs keep the client's request
	body.ForUpstream(r, g.rt.ForwardKeyHeader, g.key)
	rec := caddyhttp.NewResponseRecorder(w, nil, nil) // streams; notes the status for the decision line
	err := next.ServeHTTP(rec, r)
	g.status = rec.Status()
	return err
}

// wouldAnswer says what enforce would have answered from rec (see answer).
func (h *Handler) wouldAnswer(g *guarded, sameFingerprint bool) string {
	switch {
	case !sameFingerprint:
		return wouldMismatch
	case g.rec.State == store.StateCompleted:
		return wouldReplay
	case g.rec.State == store.StateUnknown:
		return wouldUnknown
	default:
		return wouldConflict
	}
}

// ObservedCounts are what enforce would have done with the requests a
// route in observe mode forwarded, counted by this gateway since it
// started: idemgate_observed_total by would, for the operator console.
type ObservedCounts struct {
	Replay, Conflict, Mismatch, Unknown, MissingKey, Invalid int64
}

// Total is every request that enforce would have answered itself.
func (c ObservedCounts) Total() int64 {
	return c.Replay + c.Conflict + c.Mismatch + c.Unknown + c.MissingKey + c.Invalid
}

// Observed returns route's counts (zero when it never observed anything).
func Observed(route string) ObservedCounts { return observedCounts.get(route) }

// observedTable keeps ObservedCounts by route name.
type observedTable struct{ m sync.Map } // route name → *observedRow

type observedRow [6]atomic.Int64 // in the order of wouldLabels

var wouldLabels = [...]string{wouldReplay, wouldConflict, wouldMismatch, wouldUnknown, wouldMissingKey, wouldInvalid}

// observedCounts are the process's observe-mode counts by route name,
// kept across reloads like the metrics they mirror, for the console.
var observedCounts = &observedTable{}

func (t *observedTable) add(route, would string) {
	v, ok := t.m.Load(route)
	if !ok {
		v, _ = t.m.LoadOrStore(route, new(observedRow))
	}
	row := v.(*observedRow)
	for i, l := range wouldLabels {
		if l == would {
			row[i].Add(1)
		}
	}
}

func (t *observedTable) get(route string) ObservedCounts {
	v, ok := t.m.Load(route)
	if !ok {
		return ObservedCounts{}
	}
	row := v.(*observedRow)
	return ObservedCounts{row[0].Load(), row[1].Load(), row[2].Load(), row[3].Load(), row[4].Load(), row[5].Load()}
}
