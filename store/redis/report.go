package redis

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// handlerLog is Caddy's current default logger under the handler's name:
// the one for messages of a store, which outlives the config that opened
// it.
func handlerLog() *zap.Logger {
	if l := logOverride.Load(); l != nil {
		return l
	}
	return caddy.Log().Named("http.handlers.idempotency")
}

// logOverride, when set, takes the store's messages instead (tests).
var logOverride atomic.Pointer[zap.Logger]

// availabilityReporter returns the store's OnAvailability: one warn line
// when the store stops answering and one when it answers again (with how
// long it was down and how many claims failed meanwhile), and the gauge
// idemgate_store_up{store=label}.
func availabilityReporter(label string, log func() *zap.Logger) func(Availability) {
	return func(a Availability) {
		if a.Up {
			storeUp.WithLabelValues(label).Set(1)
			log().Warn("record store available again",
				zap.String("store", label), zap.Duration("down_for", a.Down.Round(time.Millisecond)),
				zap.Int64("refused_requests", a.Refused))
			return
		}
		storeUp.WithLabelValues(label).Set(0)
		log().Warn("record store unavailable: guarded requests are refused (503) or, on fail_open routes, forwarded unguarded, until it answers again",
			zap.String("store", label), zap.Error(a.Err))
	}
}

// label names a Redis store in metrics and logs: its addresses (without
// passwords), and the Sentinel master name.
func (c *Module) label() string {
	l := strings.Join(redactAll(c.Addresses), ",")
	if c.MasterName != "" {
		l = c.MasterName + "@" + l
	}
	return l
}

// logEvictionCheck warns about a Redis whose maxmemory-policy may evict
// records: once per store connection, when it is opened.
func logEvictionCheck(logger *zap.Logger, ec EvictionCheck) {
	switch {
	case ec.Err != nil:
		logger.Info("could not read the Redis eviction policy; make sure it is noeviction",
			zap.String("redis", ec.Addr), zap.Error(ec.Err))
	case ec.Evicts():
		logger.Warn("Redis may evict idempotency records: set maxmemory-policy noeviction "+
			"(every record has a TTL, so volatile-* policies evict them too; an evicted claim lets a retry execute again)",
			zap.String("redis", ec.Addr), zap.String("maxmemory_policy", ec.Policy), zap.Int64("maxmemory", ec.MaxMemory))
	}
}

// waitShortLogEvery spaces the log lines about replica shortfalls; every
// shortfall is counted in the metric.
const waitShortLogEvery = 10 * time.Second

// waitShortLogger returns the store's OnWaitShort: count every shortfall,
// log the first and then at most one every waitShortLogEvery with the
// number in between. It logs through Caddy's current default logger, since
// the store outlives the config that opened it.
func waitShortLogger(wanted int) func(WaitShortfall) {
	var (
		mu         sync.Mutex
		last       time.Time
		suppressed int
	)
	return func(ws WaitShortfall) {
		waitShort.WithLabelValues(ws.Op).Inc()
		mu.Lock()
		if !last.IsZero() && time.Since(last) < waitShortLogEvery {
			suppressed++
			mu.Unlock()
			return
		}
		last = time.Now()
		n := suppressed
		suppressed = 0
		mu.Unlock()
		fields := []zap.Field{
			zap.String("step", ws.Op), zap.String("record_id", ws.ID),
			zap.Int("acked", ws.Acked), zap.Int("wait_replicas", wanted),
			zap.Int("more_since_last_report", n),
		}
		if ws.Err != nil {
			fields = append(fields, zap.Error(ws.Err))
		}
		msg := "fewer replicas than wait_replicas acknowledged a write; the request went on, and a failover now may lose it"
		if ws.Refused {
			msg = "fewer replicas than wait_replicas acknowledged a claim; wait_strict released it and refused the request (503)"
		}
		handlerLog().Warn(msg, fields...)
	}
}

func redactAll(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = redactURL(a)
	}
	return out
}
