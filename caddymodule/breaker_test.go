package caddymodule

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemgate/idemgate/config"
)

func TestBreaker(t *testing.T) {
	// Steps: "fail" and "ok" report an execution that was admitted
	// without the probe; "probe-fail" and "probe-ok" take the probe and
	// report it; "tick N" moves the clock N seconds. want is what admit
	// says next: "" forwards, "probe" hands out the probe, else the
	// Retry-After seconds.
	type step struct{ do, want string }
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"opens after the failures in a row", []step{
			{"fail", ""}, {"fail", ""}, {"fail", "30"}, {"tick 10", "20"}, {"tick 19", "1"}, {"tick 1", "probe"},
		}},
		{"a success resets the streak", []step{
			{"fail", ""}, {"fail", ""}, {"ok", ""}, {"fail", ""}, {"fail", ""}, {"fail", "30"},
		}},
		{"one probe at a time; its success closes", []step{
			{"fail", ""}, {"fail", ""}, {"fail", "30"}, {"tick 30", "probe"}, {"none", "1"}, {"probe-ok", ""}, {"fail", ""},
		}},
		{"a failed probe reopens for a full cool-down", []step{
			{"fail", ""}, {"fail", ""}, {"fail", "30"}, {"tick 31", "probe"}, {"tick 5", "1"}, {"probe-fail", "30"}, {"tick 29", "1"}, {"tick 1", "probe"},
		}},
		{"a cancelled probe goes to the next caller", []step{
			{"fail", ""}, {"fail", ""}, {"fail", "30"}, {"tick 30", "probe"}, {"cancel", "probe"},
		}},
		{"late outcomes while open change nothing", []step{
			{"fail", ""}, {"fail", ""}, {"fail", "30"}, {"ok", "30"}, {"fail", "30"}, {"tick 30", "probe"},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "open"}, []string{"route"})
			now := time.Unix(1000, 0)
			b := breakerFor("t-"+tt.name, &config.BreakerRule{Failures: 3, CoolDown: 30 * time.Second}, gauge)
			// The registry is the process's: without this, a second run
			// (go test -count=2) would get this run's breaker, open.
			t.Cleanup(func() { breakerFor("t-"+tt.name, nil, gauge) })
			b.now = func() time.Time { return now }
			for i, s := range tt.steps {
				switch s.do {
				case "fail", "ok":
					b.done(false, s.do == "fail")
				case "probe-fail", "probe-ok":
					b.done(true, s.do == "probe-fail")
				case "cancel":
					b.cancel(true)
				case "none":
				default:
					var n int
					if _, err := fmt.Sscanf(s.do, "tick %d", &n); err != nil {
						t.Fatalf("step %d: %q", i, s.do)
					}
					now = now.Add(time.Duration(n) * time.Second)
				}
				probe, wait := b.admit()
				got := ""
				switch {
				case probe:
					got = "probe"
				case wait > 0:
					got = strconv.Itoa(retryAfter(wait))
				}
				if got != s.want {
					t.Fatalf("step %d (%s): admit = %q, want %q", i, s.do, got, s.want)
				}
				var m dto.Metric
				_ = gauge.WithLabelValues("t-" + tt.name).Write(&m)
				open := m.GetGauge().GetValue()
				if wantOpen := s.want != ""; (open == 1) != wantOpen {
					t.Fatalf("step %d (%s): gauge %v with admit %q", i, s.do, open, got)
				}
			}
		})
	}
}

func TestBreakerForKeepsStateAcrossReloads(t *testing.T) {
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "open"}, []string{"route"})
	rule := &config.BreakerRule{Failures: 1, CoolDown: time.Minute}
	a := breakerFor("reloaded", rule, gauge)
	a.done(false, true)
	if b := breakerFor("reloaded", &config.BreakerRule{Failures: 1, CoolDown: time.Minute}, gauge); b != a {
		t.Fatal("the same rule made a new breaker")
	}
	if _, wait := a.admit(); wait == 0 {
		t.Fatal("the breaker did not open")
	}
	if c := breakerFor("reloaded", &config.BreakerRule{Failures: 2, CoolDown: time.Minute}, gauge); c == a {
		t.Fatal("a changed rule kept the old breaker")
	}
	if breakerFor("reloaded", nil, gauge) != nil {
		t.Fatal("no rule, but a breaker")
	}
}
