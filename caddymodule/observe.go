package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
)

// observe forwards a request that enforce would have answered itself
// (would says how), unguarded: nothing is claimed or recorded for it, so
// no record made while observing carries the payload of a forwarded
// duplicate, and switching the route to enforce replays what the first
// request recorded. The upstream gets the request's key (op.Key, "" when
// none) as it would under enforce. It returns the status the upstream
// answered.
func (h *Handler) observe(op *guard.Operation, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, body *exchange.Body, would string) (int, error) {
	h.gate.Metrics.Observed.WithLabelValues(op.Route.Name, would).Inc()
	r = r.WithContext(r.Context()) // a copy: Caddy's logs keep the client's request
	body.ForUpstream(r, op.Route.ForwardKeyHeader, op.Key)
	rec := caddyhttp.NewResponseRecorder(w, nil, nil) // streams; notes the status for the decision line
	err := next.ServeHTTP(rec, r)
	return rec.Status(), err
}

// wouldAnswer says what enforce would have answered from rec (see
// guard.Gate.Answer).
func wouldAnswer(rec *store.Record, sameFingerprint bool) string {
	switch {
	case !sameFingerprint:
		return metrics.WouldMismatch
	case rec.State == store.StateCompleted:
		return metrics.WouldReplay
	case rec.State == store.StateUnknown:
		return metrics.WouldUnknown
	default:
		return metrics.WouldConflict
	}
}
