package caddymodule

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/metrics"
)

// TestObserve: a route in observe mode forwards every request that
// enforce would answer itself, counts what enforce would have done, and
// still refuses a body over max_body; the records it makes are those
// enforce makes, so a switch to enforce replays them.
func TestObserve(t *testing.T) {
	const rules = `
routes:
  - name: obs_%s
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    fingerprint: { body: [amount] }
    max_body: 64
    mode: %s
`
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			sc := st.cfg(t)
			route := "obs_" + st.name
			h, logs := newHandler(t, fmt.Sprintf(rules, st.name, "observe"), sc)
			up := &counting{}
			before := metrics.Observed(route)
			beforeMetric := counterValue(t, h.gate.Metrics.Observed.WithLabelValues(route, metrics.WouldReplay))
			send := func(key, body string) int {
				return serve(h, up.next, "POST", "/deals", body, "Idempotency-Key", key).Code
			}
			steps := []struct {
				name       string
				key, body  string
				want       int
				executions int64
				would      string
			}{
				{"first", "k1", `{"amount":1}`, http.StatusCreated, 1, ""},
				{"duplicate", "k1", `{"amount":1}`, http.StatusCreated, 2, metrics.WouldReplay},
				{"duplicate again", "k1", `{"amount":1}`, http.StatusCreated, 3, metrics.WouldReplay},
				{"other payload", "k1", `{"amount":2}`, http.StatusCreated, 4, metrics.WouldMismatch},
				{"no key", "", `{"amount":1}`, http.StatusCreated, 5, metrics.WouldMissingKey},
				{"malformed key", `"unterminated`, `{"amount":1}`, http.StatusCreated, 6, metrics.WouldInvalid},
				{"body over max_body", "k2", `{"amount":1,"pad":"` + string(make([]byte, 80)) + `"}`, http.StatusRequestEntityTooLarge, 6, ""},
			}
			for _, s := range steps {
				if got := send(s.key, s.body); got != s.want {
					t.Fatalf("%s: status %d, want %d", s.name, got, s.want)
				}
				if n := up.calls.Load(); n != s.executions {
					t.Fatalf("%s: executions %d, want %d", s.name, n, s.executions)
				}
				if s.would != "" {
					line := logs.All()[len(logs.All())-1].ContextMap()
					if line["would"] != s.would || line["mode"] != "observe" || line["outcome"] != guard.OutcomeObserved {
						t.Errorf("%s: decision line %v, want mode observe, outcome observed, would %s", s.name, line, s.would)
					}
				}
			}
			got := metrics.Observed(route)
			if d := got.Replay - before.Replay; d != 2 {
				t.Errorf("observed replay = %d, want 2", d)
			}
			if got.Mismatch-before.Mismatch != 1 || got.MissingKey-before.MissingKey != 1 || got.Invalid-before.Invalid != 1 {
				t.Errorf("observed %+v (before %+v): want one mismatch, one missing key, one invalid", got, before)
			}
			if v := counterValue(t, h.gate.Metrics.Observed.WithLabelValues(route, metrics.WouldReplay)) - beforeMetric; v != 2 {
				t.Errorf("idemgate_observed_total{would=replay} grew by %v, want 2", v)
			}

			// The same store, the route now enforcing (a reload): the
			// record made while observing replays the first answer, and
			// the other payload is the 422 it always was.
			h2, _ := newHandler(t, fmt.Sprintf(rules, st.name, "enforce"), sc)
			w := serve(h2, up.next, "POST", "/deals", `{"amount":1}`, "Idempotency-Key", "k1")
			if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != `{"id":"D-1"}` {
				t.Errorf("after enforce: %d %q replayed=%q, want the first answer replayed", w.Code, w.Body.String(), w.Header().Get("Idempotent-Replayed"))
			}
			if c := serve(h2, up.next, "POST", "/deals", `{"amount":2}`, "Idempotency-Key", "k1").Code; c != http.StatusUnprocessableEntity {
				t.Errorf("other payload after enforce: %d, want 422", c)
			}
			if n := up.calls.Load(); n != 6 {
				t.Errorf("executions after enforce = %d, want still 6", n)
			}
		})
	}
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
