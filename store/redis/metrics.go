package redis

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// The Redis store's metrics, one set per process (a store outlives the
// config that opened it).
var (
	// storeUp is 1 while a Redis store answers, 0 while it does not.
	storeUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "idemgate",
		Name:      "store_up",
		Help:      "1 while the Redis record store answers claims, 0 from the first claim that failed to reach it until it answers again; by store (its addresses).",
	}, []string{"store"})
	// waitShort counts WAITs that fewer replicas than wait_replicas
	// acknowledged.
	waitShort = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "idemgate",
		Name:      "store_wait_short_total",
		Help:      "Claims and completions that fewer replicas than wait_replicas acknowledged within wait_timeout, by op.",
	}, []string{"op"})
)

// registerMetrics registers the Redis store's collectors with reg (nil
// when metrics are off), tolerating an earlier registration.
func registerMetrics(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, c := range []prometheus.Collector{storeUp, waitShort} {
		var are prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &are) {
			handlerLog().Warn("registering a Redis store metric", zap.Error(err))
		}
	}
}
