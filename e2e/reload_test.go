package e2e

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const reloadRulesBefore = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`

const reloadRulesAfter = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
  - name: refunds
    match: { path: /refunds }
    key: ["{header.Idempotency-Key}"]
`

// The second route's on_unknown_outcome (line 8) is invalid.
const reloadRulesInvalid = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
  - name: refunds
    match: { path: /refunds }
    on_unknown_outcome: maybe
    key: ["{header.Idempotency-Key}"]
`

// TestReloadAppliesEditedRules edits routes.yaml and runs `idemgate reload`
// (no --force): the new rules apply and the embedded store keeps its
// records; an invalid file fails the reload naming file, line and field,
// and the running config keeps serving.
func TestReloadAppliesEditedRules(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: reloadRulesBefore})
	rules := filepath.Join(gw.dir, "routes.yaml")

	send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", "deal-1")
	for range 2 {
		send(t, "POST", gw.url+"/refunds", []byte(`{}`), "Idempotency-Key", "refund-1")
	}
	if got := up.count("/refunds"); got != 2 {
		t.Fatalf("before the reload /refunds is unguarded: %d calls, want 2", got)
	}

	if err := os.WriteFile(rules, []byte(reloadRulesAfter), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := gw.reload(); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	for range 3 {
		send(t, "POST", gw.url+"/refunds", []byte(`{}`), "Idempotency-Key", "refund-2")
	}
	if got := up.count("/refunds"); got != 3 {
		t.Fatalf("after the reload /refunds is guarded: %d calls, want 3", got)
	}
	if r := send(t, "POST", gw.url+"/deals", []byte(`{}`), "Idempotency-Key", "deal-1"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a record from before the reload was lost: %d %s", r.status, r.body)
	}

	if err := os.WriteFile(rules, []byte(reloadRulesInvalid), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := gw.reload()
	if err == nil {
		t.Fatalf("reload of an invalid rules file succeeded:\n%s", out)
	}
	// The CLI logs the error as JSON, so the quotes around the value are escaped.
	for _, want := range []string{`routes.yaml:8: routes[1].on_unknown_outcome: `, `maybe`, `is not one of hold, release, store`} {
		if !strings.Contains(out, want) {
			t.Errorf("reload error does not name file, line and field (%q):\n%s", want, out)
		}
	}
	r := send(t, "POST", gw.url+"/refunds", []byte(`{}`), "Idempotency-Key", "refund-2")
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("old config stopped serving after a failed reload: %d %s", r.status, r.body)
	}
	if got := up.count("/refunds"); got != 3 {
		t.Errorf("/refunds calls = %d, want 3", got)
	}
}

// TestNoTransportResend: Go's http.Transport resends a body-less request
// that carries an Idempotency-Key header when a reused connection breaks
// after the request was written. Behind the gateway that would be a second
// execution the gateway never sees. The upstream here acts, then drops the
// connection: it must run exactly once, and the record is held.
func TestNoTransportResend(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/charge" {
			// The side effect happened; the answer never leaves.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	count := func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[path]
	}

	gw := startGateway(t, gatewayConfig{
		store:    "embedded",
		upstream: strings.TrimPrefix(srv.URL, "http://"),
		rules: `
routes:
  - name: charge
    match: { path: /charge }
    key: ["{header.Idempotency-Key}"]
`,
	})
	// An unguarded call leaves an idle keep-alive connection in the
	// proxy's pool, so the guarded call goes out on a reused connection.
	send(t, "POST", gw.url+"/warm", nil)
	r := send(t, "POST", gw.url+"/charge", nil, "Idempotency-Key", "charge-1")
	if r.status != http.StatusBadGateway {
		t.Errorf("status %d, want 502 from the proxy", r.status)
	}
	if got := count("/charge"); got != 1 {
		t.Fatalf("upstream executions = %d, want 1 (the transport resent the request)", got)
	}
	again := send(t, "POST", gw.url+"/charge", nil, "Idempotency-Key", "charge-1")
	if again.status != http.StatusConflict || !strings.Contains(string(again.body), "outcome-unknown") {
		t.Errorf("retry: %d %s, want 409 outcome unknown", again.status, again.body)
	}
	if got := count("/charge"); got != 1 {
		t.Errorf("upstream executions after retry = %d, want 1", got)
	}
}
