package redis

import (
	"errors"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func gaugeOf(t *testing.T, label string) float64 {
	t.Helper()
	var m dto.Metric
	if err := storeUp.WithLabelValues(label).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestAvailabilityReporter: one warn line when the store goes down (with
// its error), one when it is back (with the duration and the refused
// requests), and the gauge follows.
func TestAvailabilityReporter(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.DebugLevel)
	label := "reporter-test:6379"
	report := availabilityReporter(label, func() *zap.Logger { return zap.New(core) })
	report(Availability{Err: errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")})
	if got := gaugeOf(t, label); got != 0 {
		t.Fatalf("idemgate_store_up after the down report = %v, want 0", got)
	}
	report(Availability{Up: true, Down: 2345 * time.Millisecond, Refused: 17})
	if got := gaugeOf(t, label); got != 1 {
		t.Fatalf("idemgate_store_up after the up report = %v, want 1", got)
	}
	all := logs.All()
	if len(all) != 2 || all[0].Level != zapcore.WarnLevel || all[1].Level != zapcore.WarnLevel {
		t.Fatalf("log lines %+v, want two at warn", all)
	}
	if m := all[0].ContextMap(); m["store"] != label || m["error"] == nil {
		t.Errorf("down line fields %v", m)
	}
	if m := all[1].ContextMap(); m["down_for"] != 2345*time.Millisecond || m["refused_requests"] != int64(17) {
		t.Errorf("recovery line fields %v", m)
	}
}

// TestRedisLogLevel: go-redis's messages get a level from what they say.
func TestRedisLogLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		msg  string
		want zapcore.Level
	}{
		{`redis: connection pool: failed to dial after 1 attempts: dial tcp 127.0.0.1:1: connect: connection refused`, zapcore.DebugLevel},
		{`sentinel: GetMasterAddrByName addr=127.0.0.1:26379, master="idem" failed: EOF`, zapcore.DebugLevel},
		{`sentinel: new master="idem" addr="127.0.0.1:6380"`, zapcore.InfoLevel},
		{`sentinel: discovered new sentinel="x" for master="idem"`, zapcore.InfoLevel},
		{`addIdleConn panic: boom`, zapcore.ErrorLevel},
		{`Conn has unread data (not push notification), removing it`, zapcore.WarnLevel},
	} {
		if got := redisLogLevel(tc.msg); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.msg, got, tc.want)
		}
	}
	core, logs := observer.New(zap.DebugLevel)
	redisLogger{log: func() *zap.Logger { return zap.New(core) }}.Printf(t.Context(), "sentinel: new master=%q addr=%q", "idem", "127.0.0.1:1")
	if l := logs.All(); len(l) != 1 || l[0].Level != zapcore.InfoLevel || l[0].Message != `sentinel: new master="idem" addr="127.0.0.1:1"` {
		t.Fatalf("logged %+v", l)
	}
}
