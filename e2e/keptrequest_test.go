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

// TestKeptRequestAfterRefusedSecretChange: a restart with another
// configured secret is refused (the store's records, kept requests
// among them, were made under the first), and leaves the kept request
// as it was: back on the first secret, Run now opens and sends it once.
func TestKeptRequestAfterRefusedSecretChange(t *testing.T) {
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
		calls := crm.calls.Load()

		g.stop()
		g.env = []string{"IDEMGATE_SECRET=the-secret-after-the-change-002"}
		if startOrRefused(t, g) {
			t.Fatalf("%s: the gateway started with another secret on the store", be.name)
		}
		if !strings.Contains(g.logs.String(), "same `secret`") {
			t.Fatalf("%s: the refusal does not say why:\n%s", be.name, g.logs.String())
		}

		g.env = []string{"IDEMGATE_SECRET=the-secret-before-the-change-01"}
		g.start()
		crm.up.Store(true)
		var run struct {
			UpstreamStatus int `json:"upstream_status"`
		}
		adminJSON(t, g, "POST", "/idempotency/records/"+id+"/run", `{"reason":"the CRM is back"}`, &run)
		if run.UpstreamStatus != http.StatusCreated || crm.calls.Load() != calls+1 {
			t.Fatalf("%s: Run now on the first secret: %+v, upstream calls %d -> %d", be.name, run, calls, crm.calls.Load())
		}
		for _, s := range []string{"the-secret-before", "the-secret-after", bodyMarker} {
			if strings.Contains(g.logs.String(), s) {
				t.Fatalf("the log shows %q", s)
			}
		}
	})
}
