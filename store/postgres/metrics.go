package postgres

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The Postgres store's health as metrics, one collector per process (an
// engine outlives the config that opened it): each open engine's pool,
// by schema, read when the metrics are scraped.

var (
	poolConns = prometheus.NewDesc("idemgate_postgres_pool_connections",
		"Connections of the Postgres record store's pool, by schema and state (acquired: in a call now; idle; constructing).",
		[]string{"schema", "state"}, nil)
	poolMax = prometheus.NewDesc("idemgate_postgres_pool_max_connections",
		"The most connections the Postgres record store's pool opens (pool_size), by schema.",
		[]string{"schema"}, nil)
	poolWaits = prometheus.NewDesc("idemgate_postgres_pool_empty_acquires_total",
		"Store calls that found no idle connection in the pool and waited for one, by schema: pool_size may be too small.",
		[]string{"schema"}, nil)
	poolWaitSeconds = prometheus.NewDesc("idemgate_postgres_pool_acquire_wait_seconds_total",
		"Time store calls waited for a connection of the pool, by schema.",
		[]string{"schema"}, nil)
)

// open are the engines whose pools are reported.
var open struct {
	sync.Mutex
	engines map[*Engine]struct{}
}

func (e *Engine) report(on bool) {
	open.Lock()
	defer open.Unlock()
	if open.engines == nil {
		open.engines = map[*Engine]struct{}{}
	}
	if on {
		open.engines[e] = struct{}{}
	} else {
		delete(open.engines, e)
	}
}

// poolCollector reports the pools of the open engines.
type poolCollector struct{}

func (poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolConns, poolMax, poolWaits, poolWaitSeconds} {
		ch <- d
	}
}

func (poolCollector) Collect(ch chan<- prometheus.Metric) {
	open.Lock()
	defer open.Unlock()
	for e := range open.engines {
		s := e.pool.Stat()
		for state, n := range map[string]int32{"acquired": s.AcquiredConns(), "idle": s.IdleConns(), "constructing": s.ConstructingConns()} {
			ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(n), e.schema, state)
		}
		ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, float64(s.MaxConns()), e.schema)
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()), e.schema)
		ch <- prometheus.MustNewConstMetric(poolWaitSeconds, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds(), e.schema)
	}
}

// RegisterMetrics registers the pool collector with reg (nil when
// metrics are off), tolerating an earlier registration.
func RegisterMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(poolCollector{}); err != nil && !errors.As(err, &are) {
		return err
	}
	return nil
}
