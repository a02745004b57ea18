package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A kept request (keep_request) is sealed under a key derived from the
// secret given in the config alone: a keep_request route without one is
// refused at start, because the secret a store keeps sits beside what it
// would seal. It keeps only the request headers a re-drive needs.

// TestKeepRequestNeedsConfiguredSecret: on the real binary, a gateway
// whose rules keep requests but whose config gives no secret exits at
// start, naming the routes, keep_request and secret, and forwards
// nothing.
func TestKeepRequestNeedsConfiguredSecret(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		crm := newOutage(t)
		g := writeGateway(t, gatewayConfig{store: be.store(t), upstream: crm.addr(), rules: recoveryRules})
		g.env = []string{"CRM_REDRIVE_TOKEN=redrive-credential-42"}
		started, exit := g.startOrExit(30 * time.Second)
		if started {
			// What an earlier version did: it sealed kept requests under
			// the secret the store keeps beside them.
			var beside []string
			if entries, err := os.ReadDir(filepath.Join(g.dir, "store")); err == nil {
				for _, e := range entries {
					beside = append(beside, e.Name())
				}
			}
			r := postDeal(t, g, "/crm/deals", "evt_1")
			t.Fatalf("%s: a keep_request route without a configured secret started and kept request 1 (%d), sealed under the secret the store keeps; the store dir holds %v",
				be.name, r.status, beside)
		}
		logs := g.logs.String()
		for _, want := range []string{"keep_request", "secret", "create_crm_deal", "unsure"} {
			if !strings.Contains(logs, want) {
				t.Fatalf("%s: the gateway exited (%v) without naming %q:\n%s", be.name, exit, want, logs)
			}
		}
		if n := crm.calls.Load(); n != 0 {
			t.Fatalf("upstream calls: %d", n)
		}
		t.Logf("%s: refused at start (%v): %s", be.name, exit, lineWith(logs, "keep_request"))
	})
}

// lineWith is the first line of logs that contains s.
func lineWith(logs, s string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestRunNowSendsOnlyAllowedHeaders: a request with a DPoP proof, a
// webhook signature, the caller's credentials and a tracing header is
// kept with Content-Type, Accept, its key header and the headers the
// route's keep_headers names, and nothing else: Run now sends those (and
// redrive_headers) upstream, never the rest.
func TestRunNowSendsOnlyAllowedHeaders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		crm := newOutage(t)
		g, _ := startRecoveryGateway(t, be, gatewayConfig{upstream: crm.addr(), rules: `routes:
  - name: create_crm_deal
    match: { path: /crm/deals }
    key: ["{header.X-Delivery-Id}"]
    retry: { max_executions: 1 }
    keep_request: true
    keep_headers: [x-request-source]
    redrive_headers: { X-Redrive-Token: "{env.CRM_REDRIVE_TOKEN}" }
`})
		sent := map[string]string{
			"DPoP":                  "eyJ0eXAiOiJkcG9wK2p3dCJ9.proof.sig",
			"X-Shopify-Hmac-Sha256": "c2lnbmF0dXJlLW9mLXRoZS1ib2R5",
			"Authorization":         "Bearer client-credential-7",
			"Cookie":                "sid=session-cookie-9",
			"Content-Type":          "application/json",
			"Accept":                "application/json",
			"X-Delivery-Id":         "dlv-77",
			"X-Trace":               "trace-5",
			"X-Request-Source":      "crm-sync",
		}
		var hdr []string
		for name, v := range sent {
			hdr = append(hdr, name, v)
		}
		if r := send(t, "POST", g.url+"/crm/deals", dealBody, hdr...); r.status != http.StatusServiceUnavailable {
			t.Fatalf("first delivery: %d %s", r.status, r.body)
		}
		id := adminOnly(t, g, "create_crm_deal").ID
		crm.up.Store(true)
		var run struct {
			UpstreamStatus int `json:"upstream_status"`
		}
		adminJSON(t, g, "POST", "/idempotency/records/"+id+"/run", `{"reason":"CRM is back"}`, &run)
		if run.UpstreamStatus != http.StatusCreated || crm.calls.Load() != 2 {
			t.Fatalf("run: %+v, upstream calls %d", run, crm.calls.Load())
		}
		last, _ := crm.lastRequest()
		var leaked, missing []string
		for name, v := range sent {
			kept := slices.Contains([]string{"Content-Type", "Accept", "X-Delivery-Id", "X-Request-Source"}, name)
			switch got := last.Header.Get(name); {
			case kept && got != v:
				missing = append(missing, name)
			case !kept && got != "":
				leaked = append(leaked, name+": "+got)
			}
		}
		if last.Header.Get("X-Redrive-Token") != "redrive-credential-42" {
			missing = append(missing, "X-Redrive-Token")
		}
		slices.Sort(leaked)
		if len(leaked) > 0 || len(missing) > 0 {
			t.Fatalf("%s: Run now sent %d headers it should not have: %q; and lacked %q", be.name, len(leaked), leaked, missing)
		}
		t.Logf("%s: Run now sent %v", be.name, last.Header)
	})
}

// TestRunNowAfterSecretChange: a request kept before the configured
// secret changed does not open under the new one: after a restart with
// another secret, Run now on its record answers 409 saying it was
// sealed under another key and to release it, and sends nothing; once
// released, the client's retry executes.
func TestRunNowAfterSecretChange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		crm := newOutage(t)
		g := writeGateway(t, gatewayConfig{store: be.store(t), upstream: crm.addr(), extra: "secret {env.IDEMGATE_SECRET}", rules: `routes:
  - name: create_crm_deal
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    retry: { max_executions: 1 }
    keep_request: true
`})
		g.env = []string{"IDEMGATE_SECRET=the-secret-before-the-change-01"}
		g.start()
		t.Cleanup(g.stop)
		if r := postDeal(t, g, "/crm/deals", "before-1"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("first delivery: %d %s", r.status, r.body)
		}
		id := adminOnly(t, g, "create_crm_deal").ID

		g.stop()
		g.env = []string{"IDEMGATE_SECRET=the-secret-after-the-change-002"}
		g.start()
		// The route's chain, which a re-drive goes through, comes with
		// its first request after the start.
		if r := postDeal(t, g, "/crm/deals", "after-1"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("delivery after the restart: %d %s", r.status, r.body)
		}
		crm.up.Store(true)
		calls := crm.calls.Load()
		msg := adminError(t, g, "POST", "/idempotency/records/"+id+"/run", `{"reason":"the CRM is back"}`, http.StatusConflict)
		for _, want := range []string{id, "sealed under another key", "release the record and let the client retry"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("%s: Run now after the secret changed: %q; want it to say %q", be.name, msg, want)
			}
		}
		if n := crm.calls.Load(); n != calls {
			t.Fatalf("upstream calls: %d -> %d, want none for the refused run", calls, n)
		}
		var rec adminRecord
		adminJSON(t, g, "GET", "/idempotency/records/"+id, "", &rec)
		if rec.State != "retries_exhausted" || rec.Executions != 1 || len(rec.Audit) != 0 {
			t.Fatalf("the record after the refused run: %+v", rec)
		}
		// What the answer says to do: release it (it leaves the queue);
		// the client's retry executes (under the new secret its key has
		// a new record id too).
		if status, body := adminPost(t, g, "/idempotency/records/"+id+"/release", `{"reason":"sealed under the old secret"}`); status != http.StatusOK {
			t.Fatalf("release: %d %s", status, body)
		}
		if r := postDeal(t, g, "/crm/deals", "before-1"); r.status != http.StatusCreated || crm.calls.Load() != calls+1 {
			t.Fatalf("the client's retry after the release: %d %s, upstream calls %d -> %d", r.status, r.body, calls, crm.calls.Load())
		}
		for _, s := range []string{"the-secret-before", "the-secret-after", bodyMarker} {
			if strings.Contains(g.logs.String(), s) {
				t.Fatalf("the log shows %q", s)
			}
		}
		t.Logf("%s: Run now after the secret changed: 409 %s", be.name, msg)
	})
}
