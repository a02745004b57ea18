package breaker

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/idemgate/idemgate/config"
	"github.com/prometheus/client_golang/prometheus"
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
			b := newBreaker(config.BreakerRule{Failures: 3, CoolDown: 30 * time.Second}, gauge.WithLabelValues("t"))
			b.now = func() time.Time { return now }
			for i, s := range tt.steps {
				switch s.do {
				case "fail", "ok":
					b.Done(false, s.do == "fail")
				case "probe-fail", "probe-ok":
					b.Done(true, s.do == "probe-fail")
				case "cancel":
					b.Cancel(true)
				case "none":
				default:
					var n int
					if _, err := fmt.Sscanf(s.do, "tick %d", &n); err != nil {
						t.Fatalf("step %d: %q", i, s.do)
					}
					now = now.Add(time.Duration(n) * time.Second)
				}
				probe, wait := b.Admit()
				got := ""
				switch {
				case probe:
					got = "probe"
				case wait > 0:
					got = strconv.Itoa(RetryAfter(wait))
				}
				if got != s.want {
					t.Fatalf("step %d (%s): admit = %q, want %q", i, s.do, got, s.want)
				}
				var m dto.Metric
				_ = gauge.WithLabelValues("t").Write(&m)
				open := m.GetGauge().GetValue()
				if wantOpen := s.want != ""; (open == 1) != wantOpen {
					t.Fatalf("step %d (%s): gauge %v with admit %q", i, s.do, open, got)
				}
			}
		})
	}
}

// TestBreakerOwner: a breaker is one route of one handler, and a reload
// that keeps the handler in its place and the route's rule keeps its
// breaker, open or not.
func TestBreakerOwner(t *testing.T) {
	o := NewOwner()
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "open"}, []string{"route"})
	open := func() float64 {
		var m dto.Metric
		_ = gauge.WithLabelValues("create").Write(&m)
		return m.GetGauge().GetValue()
	}
	rule := config.BreakerRule{Failures: 1, CoolDown: time.Minute}
	// load provisions one config: a server with handlers, each with a
	// route named create under its rule; it returns their breakers and
	// the function that cleans the config up.
	load := func(rules ...config.BreakerRule) ([]*Breaker, func()) {
		srv := new(caddyhttp.Server)
		ctx := caddy.Context{Context: context.WithValue(context.Background(), caddyhttp.ServerCtxKey, srv)}
		var bs []*Breaker
		var keys []string
		for _, r := range rules {
			b, key, err := o.Load(ctx, "create", r, gauge)
			if err != nil {
				t.Fatal(err)
			}
			bs, keys = append(bs, b), append(keys, key)
		}
		return bs, func() { o.Unload(keys) }
	}

	first, cleanFirst := load(rule, rule)
	if first[0] == first[1] {
		t.Fatal("two handlers in one server with a route named create share a breaker")
	}
	first[0].Done(false, true)
	if _, wait := first[0].Admit(); wait == 0 {
		t.Fatal("the first handler's breaker did not open")
	}
	if probe, wait := first[1].Admit(); probe || wait != 0 {
		t.Fatal("the second handler's breaker is not closed")
	}
	if open() != 1 {
		t.Fatalf("gauge %v with one of two breakers open, want 1", open())
	}

	// A reload: the new config is provisioned before the old one is
	// cleaned up.
	second, cleanSecond := load(rule, rule)
	cleanFirst()
	if second[0] != first[0] || second[1] != first[1] {
		t.Fatal("a reload that kept the handlers made new breakers")
	}
	if _, wait := second[0].Admit(); wait == 0 {
		t.Fatal("the reload closed the open breaker")
	}

	// A reload that changes the first handler's rule starts it closed.
	third, cleanThird := load(config.BreakerRule{Failures: 2, CoolDown: time.Minute}, rule)
	cleanSecond()
	if third[0] == first[0] || third[1] != first[1] {
		t.Fatal("a changed rule kept its breaker, or an unchanged one lost it")
	}
	if open() != 0 {
		t.Fatalf("gauge %v once the open breaker's config is gone, want 0", open())
	}
	cleanThird()
	for range 3 {
		third[0].Done(false, true) // a request of the cleaned-up config ends late
	}
	if open() != 0 {
		t.Fatalf("gauge %v after late outcomes reached a breaker no config has, want 0", open())
	}
	left := 0
	o.pool.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Fatalf("%d breakers left once every config is gone", left)
	}
}
