// Package metrics are the gateway's Prometheus collectors: created once
// per process and registered with every config's registry.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

// Set is the gateway's collectors, created once per process and registered with every new
// config's registry: Caddy makes a fresh registry on each config load, and
// collectors registered only into the first one stop showing after a reload.
type Set struct {
	Requests    *prometheus.CounterVec
	Executions  *prometheus.CounterVec
	StoreErrors *prometheus.CounterVec
	StoreTime   *prometheus.HistogramVec
	// breakerOpen counts the open breakers (retry.breaker) of routes
	// with a name: 1 while the route's breaker is open, more only when
	// several handlers (sites) have a route of that name.
	BreakerOpen *prometheus.GaugeVec
	// exhausted counts operations held after using up their retry budget.
	Exhausted *prometheus.CounterVec
	// redrives counts operators' re-drives by route and result.
	Redrives *prometheus.CounterVec
	// observed counts what enforce would have done with the requests a
	// route in observe mode forwarded.
	Observed *prometheus.CounterVec
	// waits counts duplicates that waited for the first request, by how
	// the wait ended; waitTime is how long they waited.
	Waits    *prometheus.CounterVec
	WaitTime *prometheus.HistogramVec
	// waiters is how many duplicates wait now; waitsRefused counts those
	// that found no waiting place, by which bound was full.
	Waiters      *prometheus.GaugeVec
	WaitsRefused *prometheus.CounterVec
	// Busy counts requests answered 503 busy because their body would
	// have taken the process past max_buffered, by route.
	Busy *prometheus.CounterVec
	// kept and keptBytes are the completions the store refused for want
	// of room that the gateway keeps to write when it has room again,
	// and the bytes they take (see package unrecorded).
	Kept      prometheus.Gauge
	KeptBytes prometheus.Gauge
	// SignatureFailures counts deliveries a route's signature check
	// refused, by route and reason (missing, malformed, timestamp,
	// mismatch).
	SignatureFailures *prometheus.CounterVec
	// LateRetries counts retries that found their record's tombstone:
	// the record had expired before the retry came.
	LateRetries *prometheus.CounterVec
	// SamePayload counts requests whose payload an operation completed
	// under another key within the route's same_payload_window carried,
	// by route and action (warn, hold, reject).
	SamePayload *prometheus.CounterVec
}

// Process is the process's collectors. Process-wide on purpose:
// Caddy's metrics registry is one per process, and a series must go on
// counting across config reloads (a counter that restarted at each reload
// would read as a reset), so every handler registers and uses the same
// collectors (Register tolerates the earlier registration).
var Process = &Set{
	Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "requests_total",
		Help:      "Guarded requests by route and decision outcome.",
	}, []string{"route", "outcome"}),
	Executions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "upstream_executions_total",
		Help:      "Upstream calls made for guarded requests, by route and recorded result (completed, released, not_sent, held).",
	}, []string{"route", "result"}),
	StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "store_errors_total",
		Help:      "Record store failures by route and step.",
	}, []string{"route", "op"}),
	StoreTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "idemgate",
		Name:      "store_duration_seconds",
		Help:      "Latency of record store calls by operation.",
		Buckets:   []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 2.5},
	}, []string{"op", "result"}),
	BreakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "idemgate",
		Name:      "breaker_open",
		Help:      "Open breakers (retry.breaker) on this gateway by route name: 1 while the route's breaker refuses new executions, else 0; the number of them open when several sites have a route of that name.",
	}, []string{"route"}),
	Exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "retries_exhausted_total",
		Help:      "Operations held for an operator after retry.max_executions executions ended \"not done\", by route.",
	}, []string{"route"}),
	Redrives: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "redrives_total",
		Help:      "Operators' re-drives (Run now) by route and result (completed, released, exhausted, held, not_sent, refused, error).",
	}, []string{"route", "result"}),
	Observed: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "observed_total",
		Help:      "Requests a route in observe mode forwarded that enforce would have answered itself, by route and what enforce would have done (replay, conflict, mismatch, unknown, missing_key, invalid, signature, expired, same_payload).",
	}, []string{"route", "would"}),
	Waits: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "in_flight_waits_total",
		Help:      "Duplicates that waited for the first request with their key (on_in_flight: wait), by route and result (replayed, unknown, executed, breaker_open, timeout, client_gone, store_error).",
	}, []string{"route", "result"}),
	WaitTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "idemgate",
		Name:      "in_flight_wait_seconds",
		Help:      "How long duplicates waited for the first request with their key, by route.",
		Buckets:   []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route"}),
	Waiters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "idemgate",
		Name:      "waiters",
		Help:      "Duplicates waiting now for the first request with their key (on_in_flight: wait), by route; at most 32 per key and 256 per process.",
	}, []string{"route"}),
	WaitsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "waits_refused_total",
		Help:      "Duplicates answered 409 at once instead of waiting because too many waited already, by route and reason (per_key, per_process).",
	}, []string{"route", "reason"}),
	Busy: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "busy_total",
		Help:      "Requests answered 503 busy before anything was claimed, because their body would have taken the gateway's buffered request bodies past max_buffered, by route.",
	}, []string{"route"}),
	Kept: prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "idemgate",
		Name:      "kept_completions",
		Help:      "Results the record store refused for want of room (a full disk, a Redis at maxmemory) that this gateway keeps in memory and writes once the store has room again.",
	}),
	KeptBytes: prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "idemgate",
		Name:      "kept_completion_bytes",
		Help:      "Memory taken by the kept completions' bodies and headers.",
	}),
	SignatureFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "signature_failures_total",
		Help:      "Deliveries refused by their route's signature check (401, nothing claimed or forwarded), by route and reason (missing, malformed, timestamp, mismatch).",
	}, []string{"route", "reason"}),
	LateRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "late_retries_total",
		Help:      "Retries that came after their completed record expired and found its tombstone, by route; after_expiry says whether they executed or were refused.",
	}, []string{"route"}),
	SamePayload: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "same_payload_total",
		Help:      "Requests with a new key whose payload an operation completed on the same route and scope within same_payload_window carried, by route and action (warn, hold, reject).",
	}, []string{"route", "action"}),
}

// Register registers the process's collectors with reg (which may
// be nil when metrics are off), and more with them (the verifier's),
// tolerating an earlier registration.
func Register(reg prometheus.Registerer, logger *zap.Logger, more ...prometheus.Collector) *Set {
	if reg == nil {
		return Process
	}
	for _, c := range append([]prometheus.Collector{
		Process.Requests, Process.Executions,
		Process.StoreErrors, Process.StoreTime,
		Process.BreakerOpen, Process.Exhausted, Process.Redrives,
		Process.Observed, Process.Waits, Process.WaitTime,
		Process.Waiters, Process.WaitsRefused, Process.Busy,
		Process.Kept, Process.KeptBytes,
		Process.SignatureFailures, Process.LateRetries, Process.SamePayload,
	}, more...) {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				logger.Warn("registering idempotency metrics", zap.Error(err))
			}
		}
	}
	return Process
}

// StoreError counts a failed store call op of route.
func (m *Set) StoreError(route, op string) {
	m.StoreErrors.WithLabelValues(route, op).Inc()
}

// ObserveStore observes the duration of store call op.
func (m *Set) ObserveStore(op string, began time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.StoreTime.WithLabelValues(op, result).Observe(time.Since(began).Seconds())
}

// What enforce would have done with a request that observe forwarded: the
// would label of idemgate_observed_total and of the decision log line.
const (
	WouldReplay      = "replay"       // a completed record with the same payload: replayed
	WouldConflict    = "conflict"     // the first request with the key still in flight: 409
	WouldMismatch    = "mismatch"     // the key used before with another payload: 422
	WouldUnknown     = "unknown"      // the key's outcome held as unknown: 409
	WouldMissingKey  = "missing_key"  // no key could be derived and require_key: 400
	WouldInvalid     = "invalid"      // a malformed key or a body a key or fingerprint rule cannot read: 400
	WouldSignature   = "signature"    // the route's signature check failed: 401
	WouldExpired     = "expired"      // a retry after the record expired, under after_expiry: reject: 409
	WouldSamePayload = "same_payload" // the payload completed under another key, under on_same_payload hold or reject: 409
)

// ObservedCounts are what enforce would have done with the requests a
// route in observe mode forwarded, counted by this gateway since it
// started: idemgate_observed_total by would, for the operator console.
type ObservedCounts struct {
	Replay, Conflict, Mismatch, Unknown, MissingKey, Invalid int64
	Signature, Expired, SamePayload                          int64
}

// Total is every request that enforce would have answered itself.
func (c ObservedCounts) Total() int64 {
	return c.Replay + c.Conflict + c.Mismatch + c.Unknown + c.MissingKey + c.Invalid + c.Signature + c.Expired + c.SamePayload
}

// Observed returns route's counts (zero when it never observed anything),
// read from idemgate_observed_total itself: the counter is the one record
// of them, so nothing else keeps them, and reading them adds no series.
func Observed(route string) ObservedCounts {
	ch := make(chan prometheus.Metric)
	go func() {
		Process.Observed.Collect(ch)
		close(ch)
	}()
	var c ObservedCounts
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		var r, would string
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "route":
				r = l.GetValue()
			case "would":
				would = l.GetValue()
			}
		}
		if r != route {
			continue
		}
		n := int64(d.GetCounter().GetValue())
		switch would {
		case WouldReplay:
			c.Replay = n
		case WouldConflict:
			c.Conflict = n
		case WouldMismatch:
			c.Mismatch = n
		case WouldUnknown:
			c.Unknown = n
		case WouldMissingKey:
			c.MissingKey = n
		case WouldInvalid:
			c.Invalid = n
		case WouldSignature:
			c.Signature = n
		case WouldExpired:
			c.Expired = n
		case WouldSamePayload:
			c.SamePayload = n
		}
	}
	return c
}
