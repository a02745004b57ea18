package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
)

// outcomeObserved: a route in observe mode forwarded a request that
// enforce would have answered itself (see guarded.would).
const outcomeObserved = "observed"

// observe forwards a request that enforce would have answered itself
// (would says how), unguarded: nothing is claimed or recorded for it, so
// no record made while observing carries the payload of a forwarded
// duplicate, and switching the route to enforce replays what the first
// request recorded. The upstream gets the request's key (g.key, "" when
// none) as it would under enforce.
func (h *Handler) observe(g *guarded, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body, would string) error {
	g.outcome, g.would = outcomeObserved, would
	h.metrics.Observed.WithLabelValues(g.rt.Name, would).Inc()
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
		return metrics.WouldMismatch
	case g.rec.State == store.StateCompleted:
		return metrics.WouldReplay
	case g.rec.State == store.StateUnknown:
		return metrics.WouldUnknown
	default:
		return metrics.WouldConflict
	}
}
