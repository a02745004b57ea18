package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestVerifyHostFromRequestRefused: a verify.url whose host comes from
// the request (`http://{body.host}:PORT/lookup?source_key={key}`, the
// lookup authenticated with `Bearer {env.VERIFY_CRM_TOKEN}`) is a config
// error: `idemgate validate` refuses it naming routes.yaml, the line and
// routes[0].verify.url, and so does `run`. Accepted, such a rule sends the
// gateway's token to whichever host a caller names in its body, and that
// host's answer decides "applied": the test shows how often when the
// binary takes the rules (4 deliveries whose first execution fails, each
// naming the caller's own server as the host).
func TestVerifyHostFromRequestRefused(t *testing.T) {
	t.Parallel()
	crm := newVerifyCRM(t)
	var (
		mu     sync.Mutex
		tokens int // lookups that carried the gateway's token to the caller's host
	)
	caller := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Header.Get("Authorization") == "Bearer "+verifyToken {
			tokens++
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[{"id":"D-FORGED"}]`)
	})
	port := caller.addr()[strings.LastIndexByte(caller.addr(), ':')+1:]
	rules := `routes:
  - name: verified
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    verify:
      url: "http://{body.host}:` + port + `/lookup?source_key={key}"
      headers: { Authorization: "Bearer {env.VERIFY_CRM_TOKEN}" }
      timeout: 1s
      found: { id: "0.id" }
      after: 100ms
      every: 1s
      attempts: 1
`
	gw := writeGateway(t, gatewayConfig{store: "embedded", upstream: crm.addr(), rules: rules, extra: withSecret("op_timeout 500ms"), env: crm.env})
	out, err := gw.command("validate", "--config", gw.caddyfile, "--adapter", "caddyfile").CombinedOutput()
	if err == nil {
		const n = 4
		gw.start()
		t.Cleanup(gw.stop)
		applied := 0
		for i := range n {
			key := fmt.Sprintf("evt_%d:host_from_request", i)
			r, err := do(client, http.MethodPost, gw.url+"/crm/deals", []byte(`{"host":"127.0.0.1","title":"Acme renewal"}`),
				"Content-Type", "application/json", "Idempotency-Key", key, "X-Test-Fail", "fail")
			if err != nil || r.status != http.StatusInternalServerError {
				t.Fatalf("delivery %d: %d %v, want the CRM's 500", i, r.status, err)
			}
			rec := verifyUntil(t, gw, recordID("verified", "", key), "checked", func(r adminRecord) bool { return r.Verification.CheckCount >= 1 })
			if rec.State == store.StateCompleted && rec.Reason == store.ReasonVerified && rec.ExternalID == "D-FORGED" {
				applied++
			}
		}
		mu.Lock()
		defer mu.Unlock()
		crm.mu.Lock()
		defer crm.mu.Unlock()
		t.Fatalf("the gateway took a verify.url whose host comes from the request body: the lookup's token reached the caller's host %d of %d times, "+
			"and that host's answer made %d of %d records applied (verified, external id D-FORGED) though the CRM created %d deals",
			tokens, n, applied, n, crm.created)
	}
	text := string(out)
	// The error as Caddy logs it, in a JSON string.
	want := `routes.yaml:6: routes[0].verify.url: \"http://{body.host}:` + port + `/lookup?source_key={key}\": placeholder {body.host} is in the scheme, host or port`
	if !strings.Contains(text, want) {
		t.Errorf("validate refused the rules without naming the file, line, field and placeholder (want %q):\n%s", want, text)
	}
	if strings.Contains(text, verifyToken) {
		t.Errorf("the error shows the lookup's token:\n%s", text)
	}
	// `run` refuses the same rules: the process exits at start.
	gw.run()
	done := make(chan error, 1)
	go func() { done <- gw.cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(gw.logs.String(), want) {
			t.Errorf("run: %v, want a failure naming %q:\n%s", err, want, gw.logs.String())
		}
	case <-time.After(20 * time.Second):
		_ = gw.cmd.Process.Kill()
		<-done
		t.Fatalf("run did not refuse the rules in 20s:\n%s", gw.logs.String())
	}
}
