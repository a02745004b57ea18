package e2e

import (
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestStoreOutage stops redis-server under a running gateway: a
// fail_closed route answers 503 with Retry-After and never calls the
// upstream; a fail_open route forwards unguarded. After Redis comes back
// the gateway guards again without a restart.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{
		store:    "redis://" + srv.Addr,
		upstream: up.addr(),
		extra:    "op_timeout 500ms",
		rules: `
routes:
  - name: closed
    match: { path: /closed }
    key: ["{header.Idempotency-Key}"]
  - name: open
    match: { path: /open }
    key: ["{header.Idempotency-Key}"]
    on_store_error: fail_open
`,
	})
	if r := send(t, "POST", gw.url+"/closed", []byte(`{}`), "Idempotency-Key", "before"); r.status != http.StatusCreated {
		t.Fatalf("with Redis up: %d %s", r.status, r.body)
	}

	srv.Stop()
	r := send(t, "POST", gw.url+"/closed", []byte(`{}`), "Idempotency-Key", "during")
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("fail_closed with Redis down: %d Retry-After %q, want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	if p := r.problem(t); p["title"] != "Idempotency store is unavailable" {
		t.Errorf("problem = %v", p)
	}
	if got := up.count("/closed"); got != 1 {
		t.Errorf("fail_closed forwarded during the outage: %d upstream calls, want 1", got)
	}
	for range 2 {
		if r := send(t, "POST", gw.url+"/open", []byte(`{}`), "Idempotency-Key", "during"); r.status != http.StatusCreated {
			t.Errorf("fail_open with Redis down: %d, want the upstream's 201", r.status)
		}
	}
	if got := up.count("/open"); got != 2 {
		t.Errorf("fail_open upstream calls = %d, want 2 (unguarded)", got)
	}

	srv.Restart(t)
	waitFor(t, func() bool {
		return send(t, "POST", gw.url+"/closed", []byte(`{}`), "Idempotency-Key", "after").status == http.StatusCreated
	})
	if r := send(t, "POST", gw.url+"/closed", []byte(`{}`), "Idempotency-Key", "after"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after Redis came back: %d replayed=%q, want a replay", r.status, r.header.Get("Idempotent-Replayed"))
	}
}
