package caddymodule

import (
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store/redis"
)

// TestWaitShortfallCountedNotFailed: with wait_replicas and no replica to
// acknowledge, requests are served all the same (the store counts and logs
// each shortfall: see store/redis TestWaitShortfallCounted).
func TestWaitShortfallCountedNotFailed(t *testing.T) {
	srv := redistest.Start(t)
	h, logs := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`, &redis.Module{Addresses: []string{"redis://" + srv.Addr}, WaitReplicas: 1, WaitTimeout: caddy.Duration(10 * time.Millisecond)})
	up := &counting{}
	if w := serve(h, up.next, "POST", "/deals", "{}", "Idempotency-Key", "w1"); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	if w := serve(h, up.next, "POST", "/deals", "{}", "Idempotency-Key", "w1"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if n := logs.FilterMessageSnippet("fewer replicas than wait_replicas acknowledged").Len(); n > 0 {
		t.Errorf("%d shortfall lines in the handler's log; the store logs them", n)
	}
	if up.calls.Load() != 1 {
		t.Errorf("executions = %d", up.calls.Load())
	}
}

// TestWaitStrictRefusesClaim: with wait_replicas and wait_strict and no
// replica to acknowledge, a new key is not forwarded (not even on a
// fail_open route): 503 with Retry-After, and the claim is released, so a
// gateway without strict executes the same key at once (409 if the claim
// had been left in flight).
func TestWaitStrictRefusesClaim(t *testing.T) {
	srv := redistest.Start(t)
	rules := `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
  - name: open
    match: { path: /open }
    key: ["{header.Idempotency-Key}"]
    on_store_error: fail_open
`
	strict, _ := newHandler(t, rules, &redis.Module{Addresses: []string{"redis://" + srv.Addr}, WaitReplicas: 1, WaitStrict: true,
		WaitTimeout: caddy.Duration(10 * time.Millisecond)})
	up := &counting{}
	for _, path := range []string{"/deals", "/open"} {
		w := serve(strict, up.next, "POST", path, "{}", "Idempotency-Key", "s1")
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%s: strict claim without a replica: %d Retry-After %q %s, want 503 with Retry-After",
				path, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("forwarded %d times under wait_strict without a replica, want 0", n)
	}
	plain, _ := newHandler(t, rules, &redis.Module{Addresses: []string{"redis://" + srv.Addr}})
	if w := serve(plain, up.next, "POST", "/deals", "{}", "Idempotency-Key", "s1"); w.Code != http.StatusCreated {
		t.Fatalf("the same key without strict: %d %s, want 201 (the refused claim was released)", w.Code, w.Body)
	}
	// The completed key replays through the strict gateway.
	w := serve(strict, up.next, "POST", "/deals", "{}", "Idempotency-Key", "s1")
	if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay under wait_strict without a replica: %d %s", w.Code, w.Body)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}
