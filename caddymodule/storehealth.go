package caddymodule

import (
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/idemgate/idemgate/store/redis"
)

// handlerLog is Caddy's current default logger under the handler's name:
// the one for messages of a store, which outlives the config that opened
// it.
func handlerLog() *zap.Logger { return caddy.Log().Named("http.handlers.idempotency") }

// availabilityReporter returns the store's OnAvailability: one warn line
// when the store stops answering and one when it answers again (with how
// long it was down and how many claims failed meanwhile), and the gauge
// idemgate_store_up{store=label}.
func availabilityReporter(label string, log func() *zap.Logger) func(redis.Availability) {
	return func(a redis.Availability) {
		if a.Up {
			processMetrics.storeUp.WithLabelValues(label).Set(1)
			log().Warn("record store available again",
				zap.String("store", label), zap.Duration("down_for", a.Down.Round(time.Millisecond)),
				zap.Int64("refused_requests", a.Refused))
			return
		}
		processMetrics.storeUp.WithLabelValues(label).Set(0)
		log().Warn("record store unavailable: guarded requests are refused (503) or, on fail_open routes, forwarded unguarded, until it answers again",
			zap.String("store", label), zap.Error(a.Err))
	}
}

// label names a Redis store in metrics and logs: its addresses (without
// passwords), and the Sentinel master name.
func (c StoreConfig) label() string {
	l := strings.Join(redactAll(c.Addresses), ",")
	if c.MasterName != "" {
		l = c.MasterName + "@" + l
	}
	return l
}
