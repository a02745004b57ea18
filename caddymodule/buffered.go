package caddymodule

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/exchange"
	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/problem"
)

// DefaultMaxBuffered is max_buffered when it is not set.
const DefaultMaxBuffered = 256 << 20

// bufferedBytes is the gauge idemgate_buffered_bytes: the process's
// buffered request bodies (exchange.Buffered), read when scraped.
var bufferedBytes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
	Namespace: "idemgate",
	Name:      "buffered_bytes",
	Help:      "Bytes of request bodies the gateway holds now (read whole to key and fingerprint them), at most max_buffered.",
}, func() float64 { return float64(exchange.Buffered()) })

// maxBuffered is the handler's max_buffered in bytes.
func (h *Handler) maxBuffered() int64 {
	if h.MaxBuffered > 0 {
		return int64(h.MaxBuffered)
	}
	return DefaultMaxBuffered
}

// validateBuffered checks max_buffered against the routes: a budget under
// a route's max_body would refuse that route's largest bodies for ever.
func (h *Handler) validateBuffered() error {
	if h.MaxBuffered < 0 {
		return fmt.Errorf("idempotency: max_buffered must be positive, got %d", h.MaxBuffered)
	}
	for _, rt := range h.routes {
		if rt.MaxBody > h.maxBuffered() {
			return fmt.Errorf("idempotency: max_buffered %s is less than route %s's max_body %s: its largest bodies could never be read",
				config.Size(h.maxBuffered()), rt.Name, config.Size(rt.MaxBody))
		}
	}
	return nil
}

// busy answers a request whose body would have taken the process's
// buffered request bodies past max_buffered: 503 busy, Retry-After: 1.
// Nothing was claimed or forwarded.
func (h *Handler) busy(op *guard.Operation, w http.ResponseWriter) (guard.Outcome, error) {
	rt := op.Route
	h.gate.Metrics.Busy.WithLabelValues(rt.Name).Inc()
	return guard.Refuse(op, w, guard.OutcomeBusy, problem.Busy.With(fmt.Sprintf("the gateway holds as many request bodies as it may (max_buffered %s); nothing was claimed or forwarded; retry shortly", config.Size(h.maxBuffered())), rt.Name))
}
