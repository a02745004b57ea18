package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store"
)

// The lookup's answer must be about this operation: an answer about
// another key (found.match), or one that lists every deal because the
// API ignored its filter (more than one element), is inconclusive, and
// the record stays held instead of replaying someone else's deal. The
// route "strict" replays the deal itself (found.object), not the search
// result around it.

// verifyInconclusive waits for the record's first scheduled check and
// asserts it was inconclusive and left the record held; a retry then
// gets 409 and no second deal is made.
func verifyInconclusive(t *testing.T, gw *gateway, crm *verifyCRM, path, route, key string) {
	t.Helper()
	id := recordID(route, "", key)
	rec := verifyUntil(t, gw, id, "checked once", func(r adminRecord) bool { return r.Verification.CheckCount >= 1 })
	if rec.State != store.StateUnknown || rec.ExternalID != "" || rec.Verification.Checks[0].Verdict != store.VerdictInconclusive {
		t.Fatalf("after the check: %s, external id %q, checks %+v; want held, no external id, inconclusive", rec.State, rec.ExternalID, rec.Verification.Checks)
	}
	r := verifyPost(gw.url+path, key, "")
	if !isProblem(t, r, http.StatusConflict, "outcome-unknown", id) {
		t.Fatalf("retry: %d (replayed %q) %s, want 409 outcome unknown", r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}
	rec = verifyGet(t, gw, id)
	if rec.State != store.StateUnknown || rec.Verification.CheckCount < 2 {
		t.Errorf("after the retry's check: %s, %d checks; want held, 2 checks", rec.State, rec.Verification.CheckCount)
	}
	for _, c := range rec.Verification.Checks {
		if c.Verdict != store.VerdictInconclusive {
			t.Errorf("a check: %+v, want inconclusive", c)
		}
	}
	if n := len(crm.dealsOf(key)); n != 1 {
		t.Errorf("deals for the key: %d, want 1", n)
	}
}

// TestVerifyAnswerAboutAnotherKey: the CRM creates the deal and resets
// the connection; its lookup answers with another key's deal
// (source_key someone-else). Expected: inconclusive, held, the retry
// gets 409, 1 deal. Once the lookup answers with the key's own deal, the
// next retry replays the deal object (not the list) as 201.
func TestVerifyAnswerAboutAnotherKey(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		crm := newVerifyCRM(t)
		gw := verifyStart(t, crm, b.store(t))
		key := "evt_301:create_crm_deal"
		crm.lookupMode.Store("other")

		if r := verifyPost(gw.url+"/strict/deals", key, "reset"); r.status != http.StatusBadGateway {
			t.Fatalf("first delivery: %d %s, want 502 (the CRM reset the connection)", r.status, r.body)
		}
		verifyInconclusive(t, gw, crm, "/strict/deals", "strict", key)

		_, view := adminDo(t, gw, http.MethodGet, "/idempotency/records/"+recordID("strict", "", key), "")
		var v struct {
			Verification struct {
				Match map[string]string `json:"match"`
			} `json:"verification"`
		}
		if json.Unmarshal(view, &v) != nil || v.Verification.Match["0.source_key"] != key {
			t.Errorf("the record view's match values: %s", view)
		}

		crm.lookupMode.Store("")
		r := verifyPost(gw.url+"/strict/deals", key, "")
		deals := crm.dealsOf(key)
		var deal struct {
			ID        string `json:"id"`
			SourceKey string `json:"source_key"`
		}
		if len(deals) != 1 || r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" ||
			json.Unmarshal(r.body, &deal) != nil || deal.ID != deals[0] || deal.SourceKey != key {
			t.Fatalf("retry once the lookup finds the key's deal: %d (replayed %q) %s, deals %v; want 201, the deal object", r.status, r.header.Get("Idempotent-Replayed"), r.body, deals)
		}
		rec := verifyGet(t, gw, recordID("strict", "", key))
		if rec.State != store.StateCompleted || rec.Reason != store.ReasonVerified || rec.ExternalID != deals[0] {
			t.Errorf("record: %s %s %q, want completed, verified, %s", rec.State, rec.Reason, rec.ExternalID, deals[0])
		}
	})
}

// TestVerifyListEverything: the lookup ignores its filter and lists
// every deal in the CRM (another client's and this one's). Expected, on
// a route without found.match as on one with it: inconclusive, held,
// the retry gets 409, 1 deal per key.
func TestVerifyListEverything(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		crm := newVerifyCRM(t)
		gw := verifyStart(t, crm, b.store(t))
		// Another client's deal, made directly on the CRM.
		if r, err := do(client, http.MethodPost, crm.srv.URL+"/crm/deals", []byte(`{}`), "Idempotency-Key", "someone-else"); err != nil || r.status != http.StatusCreated {
			t.Fatalf("another client's deal: %v %d", err, r.status)
		}
		crm.lookupMode.Store("everything")
		for _, tc := range []struct{ path, route, key string }{
			{"/crm/deals", "verified", "evt_302:create_crm_deal"},
			{"/strict/deals", "strict", "evt_303:create_crm_deal"},
		} {
			if r := verifyPost(gw.url+tc.path, tc.key, "reset"); r.status != http.StatusBadGateway {
				t.Fatalf("%s: first delivery: %d %s, want 502", tc.route, r.status, r.body)
			}
			verifyInconclusive(t, gw, crm, tc.path, tc.route, tc.key)
		}
		if n := len(crm.dealsOf("someone-else")); n != 1 {
			t.Errorf("the other client's deals: %d, want 1", n)
		}
	})
}

// TestVerifyRefusesCallerCredentials: a lookup URL that copies the
// caller's Authorization header (or the route's scope header) would put
// the caller's token on the record and in the admin API: the real
// binary refuses the config, naming the file, line and field.
func TestVerifyRefusesCallerCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, rules, want string }{
		{"authorization", `
routes:
  - name: leaky
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    verify:
      url: "http://127.0.0.1:9/crm/deals?source_key={key}&token={header.Authorization}"
      found: { id: "0.id" }
`, "routes.yaml:7: routes[0].verify.url: placeholder {header.Authorization} copies the caller's credentials (the Authorization header)"},
		{"scope header", `
defaults:
  scope: ["{header.X-Api-Key}"]
routes:
  - name: leaky
    match: { path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
    verify:
      url: "http://127.0.0.1:9/crm/deals?source_key={key}"
      found: { id: "0.id", match: { "0.owner": "{header.X-Api-Key}" } }
`, "routes.yaml:10: routes[0].verify.found.match.0.owner: placeholder {header.X-Api-Key} copies the caller's credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gw := writeGateway(t, gatewayConfig{store: "embedded", upstream: "127.0.0.1:9", rules: tc.rules})
			out, err := gw.command("validate", "--config", gw.caddyfile, "--adapter", "caddyfile").CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("validate: %v\n%s\nwant a failure naming %q", err, out, tc.want)
			}
		})
	}
}
