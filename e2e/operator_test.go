package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/idemgate/idemgate/store"
)

// TestOperatorWaitsForCheck: a retry of a held record runs a
// verification check whose lookup is slow; meanwhile an operator
// completes, then releases the record through the admin API. Both are
// refused with 409 (a check holds the record), the check's "found"
// verdict lands, the retry replays the deal, and the operation ran once.
//
// Expected, on both stores: complete 409, release 409, the retry
// replays the check's answer naming the deal, 1 deal in the CRM, the record completed
// (verified) with executions 1 and no operator on its audit trail.
func TestOperatorWaitsForCheck(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		crm := newVerifyCRM(t)
		gw := verifyStart(t, crm, b.store(t))
		key := "evt_190:create_crm_deal"
		id := recordID("manual", "", key)
		if r := verifyPost(gw.url+"/manual/deals", key, "reset"); r.status != http.StatusBadGateway {
			t.Fatalf("first delivery: %d %s, want 502 (the CRM reset the connection)", r.status, r.body)
		}
		deals := crm.dealsOf(key)
		if len(deals) != 1 {
			t.Fatalf("deals after the reset: %v, want 1", deals)
		}

		crm.holdLookups()
		retried := make(chan response, 1)
		go func() { retried <- verifyPost(gw.url+"/manual/deals", key, "") }()
		<-crm.lookupWaited // the retry's check is asking the CRM

		base := "/idempotency/records/" + id
		msg := adminError(t, gw, http.MethodPost, base+"/complete", `{"status":201,"body":"{}"}`, http.StatusConflict)
		if !strings.Contains(msg, "verification check") {
			t.Errorf("complete during the check: %q, want a message naming the running check", msg)
		}
		msg = adminError(t, gw, http.MethodPost, base+"/release", `{"reason":"no deal in the CRM"}`, http.StatusConflict)
		if !strings.Contains(msg, "verification check") {
			t.Errorf("release during the check: %q, want a message naming the running check", msg)
		}
		crm.openLookups()

		for i, r := range []response{<-retried, verifyPost(gw.url+"/manual/deals", key, "")} {
			if r.status/100 != 2 || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.body), deals[0]) {
				t.Errorf("retry %d: %d (replayed %q) %s, want the replay of the check's answer naming %s",
					i+1, r.status, r.header.Get("Idempotent-Replayed"), r.body, deals[0])
			}
		}
		if n := len(crm.dealsOf(key)); n != 1 {
			t.Errorf("deals: %d, want 1 (the operation ran once)", n)
		}
		rec := verifyGet(t, gw, id)
		if rec.State != store.StateCompleted || rec.Reason != store.ReasonVerified || rec.Executions != 1 ||
			rec.ExternalID != deals[0] || len(rec.Audit) != 0 {
			t.Errorf("record: %+v, want completed (verified), executions 1, external id %s, no operator action", rec, deals[0])
		}
		t.Logf("after the refused complete and release: record %s (%s), deals %d, executions %d",
			rec.State, rec.Reason, len(crm.dealsOf(key)), rec.Executions)
	})
}

// tokenAnswers are upstream answers that carry credentials, by path:
// what an OAuth token endpoint or a careless API sends back.
var tokenAnswers = map[string]struct{ contentType, body string }{
	"/json-as-text": {"text/plain; charset=utf-8", `{"id":"T-1","client_secret":"e2e-secret-1","api_key":"e2e-secret-2"}`},
	"/json-bom":     {"application/json", "\ufeff" + `{"id":"T-2","password":"e2e-secret-3","nested":{"authorization":"Bearer e2e-secret-4"}}`},
	"/form":         {"application/x-www-form-urlencoded", `access_token=e2e-secret-5&expires_in=3600&scope=deals`},
	"/custom":       {"application/json", `{"id":"T-4","card_number":"e2e-secret-6"}`},
}

const redactRules = `
defaults:
  redact_fields: [card_number]
routes:
  - name: tokens
    match: { path: /* }
    key: ["{header.Idempotency-Key}"]
`

// TestOperatorRedactsBodies: on the real binary, the admin API's record
// view and the console's record page (behind basic_auth) show none of
// the credentials in stored answers that are JSON served as text/plain,
// JSON with a BOM, a URL-encoded form, or a field named in
// redact_fields; the replay still carries them.
//
// Expected: "[redacted]" in every view, no "e2e-secret-" anywhere in
// them, the other values kept; replays byte for byte.
func TestOperatorRedactsBodies(t *testing.T) {
	t.Parallel()
	up := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		a, ok := tokenAnswers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(a.body))
	})
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), rules: redactRules, extra: withSecret(""),
		sites: consoleSite(port, "basic_auth {\n\t\t\talice "+string(hash)+"\n\t\t}", "")})
	console := fmt.Sprintf("http://127.0.0.1:%d/ops/", port)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))
	for path, a := range tokenAnswers {
		key := "tok" + strings.ReplaceAll(path, "/", "-")
		first := send(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", key)
		replay := send(t, "POST", gw.url+path, []byte(`{}`), "Idempotency-Key", key)
		if first.status != http.StatusOK || replay.header.Get("Idempotent-Replayed") != "true" || string(replay.body) != a.body {
			t.Fatalf("%s: %d, replay %q %q, want the stored answer replayed as sent", path, first.status, replay.header.Get("Idempotent-Replayed"), replay.body)
		}
		id := recordID("tokens", "", key)
		_, view := adminDo(t, gw, http.MethodGet, "/idempotency/records/"+id, "")
		page := send(t, "GET", console+"records/"+id, nil, "Authorization", auth)
		for what, text := range map[string]string{"admin API": string(view), "console": string(page.body)} {
			if strings.Contains(text, "e2e-secret-") || !strings.Contains(text, "[redacted]") {
				t.Errorf("%s, %s: a credential is shown or nothing is redacted:\n%s", path, what, text)
			}
		}
		var shown struct {
			Body string `json:"body"`
		}
		_ = json.Unmarshal(view, &shown)
		t.Logf("%s (%s): the admin API shows %s", path, a.contentType, shown.Body)
	}
}
