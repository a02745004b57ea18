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

// Collect reports each schema once: the pools of engines open on one
// schema (two configs with different store options on one database) are
// summed, as a series may be collected only once.
func (poolCollector) Collect(ch chan<- prometheus.Metric) {
	type sums struct{ acquired, idle, constructing, max, waits, waitSeconds float64 }
	bySchema := map[string]*sums{}
	open.Lock()
	for e := range open.engines {
		s := e.pool.Stat()
		t := bySchema[e.schema]
		if t == nil {
			t = &sums{}
			bySchema[e.schema] = t
		}
		t.acquired += float64(s.AcquiredConns())
		t.idle += float64(s.IdleConns())
		t.constructing += float64(s.ConstructingConns())
		t.max += float64(s.MaxConns())
		t.waits += float64(s.EmptyAcquireCount())
		t.waitSeconds += s.EmptyAcquireWaitTime().Seconds()
	}
	open.Unlock()
	for schema, t := range bySchema {
		for state, n := range map[string]float64{"acquired": t.acquired, "idle": t.idle, "constructing": t.constructing} {
			ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, n, schema, state)
		}
		ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, t.max, schema)
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, t.waits, schema)
		ch <- prometheus.MustNewConstMetric(poolWaitSeconds, prometheus.CounterValue, t.waitSeconds, schema)
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
