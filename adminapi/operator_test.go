package adminapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/caddymodule"
	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
)

const operatorTestRules = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
    max_response: 64
    redact_fields: [card_number]
`

// storedRecord puts a completed record of route deals with res into h's
// store and returns its id.
func storedRecord(t *testing.T, h *caddymodule.Handler, name string, res store.Result) string {
	t.Helper()
	sum := sha256.Sum256([]byte(t.Name() + "/" + name))
	id := hex.EncodeToString(sum[:16])
	ctx := context.Background()
	req := store.ClaimRequest{ID: id, Route: "deals", Operation: "deals", Fingerprint: "fp", FingerprintRule: "whole",
		Token: "tok", Lease: time.Minute, HoldTTL: time.Hour}
	if r, err := engine(h).Claim(ctx, req); err != nil || !r.Claimed {
		t.Fatalf("Claim: %+v, %v", r, err)
	}
	if res.Status == 0 {
		if ok, err := engine(h).MarkUnknown(ctx, id, "tok", "upstream_5xx", time.Hour); !ok || err != nil {
			t.Fatalf("MarkUnknown: %v, %v", ok, err)
		}
		return id
	}
	if ok, err := engine(h).Complete(ctx, store.CompleteRequest{Claim: req, Result: res, TTL: time.Hour}); !ok || err != nil {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	return id
}

// TestOperatorRedactsStoredBodies: the record view hides the values of
// credential-like fields in stored bodies that are JSON whatever their
// Content-Type (a UTF-8 BOM allowed) and in URL-encoded forms, and of
// the route's redact_fields; other values stay.
func TestOperatorRedactsStoredBodies(t *testing.T) {
	t.Parallel()
	h := newHandler(t, operatorTestRules, &embedded.Module{Dir: t.TempDir()})
	a := newAdmin(h)
	for _, tc := range []struct {
		name, ct, body string
		keep           []string
	}{
		{"json", "application/json", `{"id":"D-1","client_secret":"s-secret-1","api_key":"k-secret-2","nested":{"password":"p-secret-3"}}`, []string{"D-1"}},
		{"json as text/plain", "text/plain; charset=utf-8", `{"id":"D-2","client_secret":"s-secret-4","Authorization":"Bearer b-secret-5"}`, []string{"D-2"}},
		{"json with a BOM", "application/json", "\ufeff" + `{"id":"D-3","access_token":"t-secret-6","token":"t-secret-7","secret":"s-secret-8"}`, []string{"D-3"}},
		{"json array, no Content-Type", "", `[{"id":"D-4","password":"p-secret-9"}]`, []string{"D-4"}},
		{"url-encoded form", "application/x-www-form-urlencoded", `access_token=t-secret-10&expires_in=3600&scope=repo`, []string{"expires_in=3600", "scope=repo"}},
		{"redact_fields", "application/json", `{"id":"D-6","Card_Number":"4111-secret-13"}`, []string{"D-6"}},
		{"url-encoded form as text/plain", "text/plain", `id=D-5&client_secret=s-secret-11&api_key=k-secret-12`, []string{"D-5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			if tc.ct != "" {
				hdr.Set("Content-Type", tc.ct)
			}
			id := storedRecord(t, h, tc.name, store.Result{Status: 200, Header: hdr, Body: []byte(tc.body)})
			code, b := adminDo(t, a, http.MethodGet, "/idempotency/records/"+id, "")
			var v struct {
				Body *string `json:"body"`
			}
			if code != http.StatusOK || json.Unmarshal(b, &v) != nil || v.Body == nil {
				t.Fatalf("record view: %d %s", code, b)
			}
			if strings.Contains(*v.Body, "secret-") || !strings.Contains(*v.Body, operator.Redacted) {
				t.Errorf("the record view shows %s, want every credential-like value %s", *v.Body, operator.Redacted)
			}
			for _, k := range tc.keep {
				if !strings.Contains(*v.Body, k) {
					t.Errorf("the record view lost %q: %s", k, *v.Body)
				}
			}
		})
	}
}

// TestOperatorCompleteLimits: the admin API checks a completion by the
// same rules as the console: the body within the route's max_response,
// a Content-Type that is a short, valid header value, an external id of
// at most store.MaxExternalID bytes.
func TestOperatorCompleteLimits(t *testing.T) {
	t.Parallel()
	h := newHandler(t, operatorTestRules, &embedded.Module{Dir: t.TempDir()})
	a := newAdmin(h)
	for _, tc := range []struct {
		name, body, msg string
	}{
		{"body above max_response", `{"status":201,"body":"` + strings.Repeat("x", 65) + `"}`, "max_response"},
		{"content type too long", `{"status":201,"body":"{}","headers":{"Content-Type":"` + strings.Repeat("a", 300) + `"}}`, "content type"},
		{"external id too long", `{"status":201,"external_id":"` + strings.Repeat("x", 256) + `"}`, "external id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := storedRecord(t, h, tc.name, store.Result{})
			code, b := adminDo(t, a, http.MethodPost, "/idempotency/records/"+id+"/complete", tc.body)
			if code != http.StatusBadRequest || !strings.Contains(string(b), tc.msg) {
				t.Errorf("complete: %d %s, want 400 naming %q", code, b, tc.msg)
			}
		})
	}
}

// TestOperatorRefusesInvalidActions: an operator action whose request the
// operator service or the store refuses for its arguments is answered
// 400 with the reason, on every engine, and changes nothing.
func TestOperatorRefusesInvalidActions(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", store.MaxReasonLen+1)
	for _, sc := range testStores {
		t.Run(sc.name, func(t *testing.T) {
			h := newHandler(t, operatorTestRules, sc.cfg(t))
			a := newAdmin(h)
			for i, tc := range []struct {
				action, body, msg string
			}{
				{"release", `{"reason":"` + long + `"}`, "reason is longer"},
				{"complete", `{"status":201,"reason":"` + long + `"}`, "reason is longer"},
				{"complete", `{"status":600}`, "final HTTP status"},
				{"complete", `{"status":201,"headers":{"X-A":5}}`, "header values"},
				{"verify", `{"reason":"` + long + `"}`, "reason is longer"},
				{"run", `{}`, "reason is required"},
			} {
				id := storedRecord(t, h, strconv.Itoa(i), store.Result{})
				code, b := adminDo(t, a, http.MethodPost, "/idempotency/records/"+id+"/"+tc.action, tc.body)
				if code != http.StatusBadRequest || !strings.Contains(string(b), tc.msg) {
					t.Errorf("%s %.40s: %d %s, want 400 naming %q", tc.action, tc.body, code, b, tc.msg)
				}
				if r := mustRecord(t, h, id); r.State != store.StateUnknown || len(r.Audit) != 0 {
					t.Errorf("%s %.40s: a refused action changed the record: %s, %d audit entries", tc.action, tc.body, r.State, len(r.Audit))
				}
			}
		})
	}
}

// mustRecord reads record id from h's store.
func mustRecord(t *testing.T, h *caddymodule.Handler, id string) *store.Record {
	t.Helper()
	r, err := engine(h).Get(context.Background(), id)
	if err != nil || r == nil {
		t.Fatalf("Get(%s): %v, %v", id, r, err)
	}
	return r
}
