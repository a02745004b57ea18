package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/redrive"
	"github.com/idemgate/idemgate/store"
)

// TestRunNowAsksTheBreaker: the breaker applies to every execution,
// whoever starts it. While a route's breaker is open an operator's Run
// now is refused with the breaker's wait, claims nothing and forwards
// nothing; once the cool-down is over the run is the breaker's probe,
// and its success closes the breaker.
func TestRunNowAsksTheBreaker(t *testing.T) {
	const rules = `
routes:
  - name: payments
    match: { path: /payments }
    key: ["{header.Idempotency-Key}"]
    keep_request: true
    retry: { max_executions: 1, breaker: { failures: 1, cool_down: 60s } }
`
	h, _, err := provisionHandler(t, rules, testStores[0].cfg(t), "configured-keep-secret-breaker-1")
	if err != nil {
		t.Fatal(err)
	}
	rec := keepOne(t, h, "pay-breaker") // its 503 opens the breaker
	act := store.Action{Actor: "admin-api", Reason: "the upstream is back"}

	_, status, err := h.redrive(context.Background(), h.routes[0], rec, act)
	var open *operator.BreakerOpenError
	if !errors.As(err, &open) || status != 0 || open.Wait <= 0 || open.Wait > time.Minute {
		t.Fatalf("Run now with the breaker open = %d, %v; want the breaker's refusal with its wait", status, err)
	}
	if got := operator.Status(err); got != http.StatusServiceUnavailable || open.RetryAfter() < 1 {
		t.Fatalf("operator.Status(%v) = %d, Retry-After %d; want 503 with the breaker's wait", err, got, open.RetryAfter())
	}
	// The operator service's run (the admin API's and the console's)
	// meets the same refusal.
	op := operator.New(func() []operator.LiveStore { return []operator.LiveStore{h.LiveStore()} })
	target, err := op.Find(context.Background(), rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := op.Run(context.Background(), target, act); !errors.As(err, &open) {
		t.Fatalf("the operator service's run with the breaker open: %v; want the breaker's refusal", err)
	}
	now, err := h.gate.Store.Get(context.Background(), rec.ID)
	if err != nil || now.Executions != rec.Executions || now.State != rec.State || len(now.Audit) != 0 {
		t.Fatalf("a refused Run now changed the record: %+v, %v (was %+v)", now, err, rec)
	}

	// The cool-down is over: the run goes through as the probe.
	b := h.runtime(h.routes[0]).breaker
	b.SetClock(func() time.Time { return time.Now().Add(2 * time.Minute) })
	ok := func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusCreated)
		return nil
	}
	h.runtime(h.routes[0]).chain.Store(&redrive.Chain{Next: caddyhttp.HandlerFunc(ok)})
	if _, status, err = h.redrive(context.Background(), h.routes[0], rec, act); err != nil || status != http.StatusCreated {
		t.Fatalf("Run now after the cool-down = %d, %v; want the upstream's 201", status, err)
	}
	if probe, wait := b.Admit(); probe || wait != 0 {
		t.Fatalf("the run's success left the breaker open (probe %v, wait %v)", probe, wait)
	}
}
