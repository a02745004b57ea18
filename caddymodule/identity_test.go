package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestRequestTargetIsIdentity: the same key sent for another object of a
// wildcard route, or with other query parameters, is a 422, never a replay
// of the first object's result; the query's parameter order does not
// matter; fingerprint.query: false leaves the query out; two routes that
// share an operation under different literal paths share their records.
func TestRequestTargetIsIdentity(t *testing.T) {
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			h, _ := newHandler(t, `
routes:
  - name: refund
    match: { methods: [POST], path: "/orders/*/refund" }
    key: ["{header.Idempotency-Key}"]
  - name: charge
    match: { methods: [POST], path: /charge }
    key: ["{header.Idempotency-Key}"]
    fingerprint: { query: false }
  - name: deal_webhook
    operation: create_deal
    match: { methods: [POST], path: /hooks/deal }
    key: ["{header.Idempotency-Key}"]
  - name: deal_retry
    operation: create_deal
    match: { methods: [POST], path: /internal/deals/retry }
    key: ["{header.Idempotency-Key}"]
`, st.cfg(t))
			up := &counting{}
			steps := []struct {
				path, key string
				want      int
				replayed  bool
			}{
				{"/orders/1/refund", "k1", http.StatusCreated, false},
				{"/orders/1/refund", "k1", http.StatusCreated, true},
				{"/orders/2/refund", "k1", http.StatusUnprocessableEntity, false},
				{"/orders/1/refund?amount=5", "k2", http.StatusCreated, false},
				{"/orders/1/refund?amount=500", "k2", http.StatusUnprocessableEntity, false},
				{"/orders/1/refund?a=1&b=2", "k3", http.StatusCreated, false},
				{"/orders/1/refund?b=2&a=1", "k3", http.StatusCreated, true},
				{"/charge?debug=1", "k4", http.StatusCreated, false},
				{"/charge?debug=2", "k4", http.StatusCreated, true},
				{"/hooks/deal", "k5", http.StatusCreated, false},
				{"/internal/deals/retry", "k5", http.StatusCreated, true},
			}
			for i, s := range steps {
				w := serve(h, up.next, "POST", s.path, `{"amount":5}`, "Idempotency-Key", s.key)
				replayed := w.Header().Get("Idempotent-Replayed") == "true"
				if w.Code != s.want || replayed != s.replayed {
					t.Fatalf("step %d: POST %s key %s: %d replayed=%v, want %d replayed=%v; body %s",
						i, s.path, s.key, w.Code, replayed, s.want, s.replayed, w.Body)
				}
			}
			if n := up.calls.Load(); n != 5 {
				t.Errorf("upstream executions: %d, want 5", n)
			}
		})
	}
}

// TestMatchNormalisedRequest: lower-case methods and the path spellings
// that upstream frameworks route alike are guarded as the route, and the
// same key on any of them is the same operation (one execution).
func TestMatchNormalisedRequest(t *testing.T) {
	h := dealsHandler(t)
	up := &counting{}
	spellings := []struct{ method, path string }{
		{"POST", "/crm/deals"},
		{"post", "/crm/deals"},
		{"Post", "/crm/deals"},
		{"POST", "/crm/deals/"},
		{"POST", "/crm/deals;jsessionid=1"},
		{"POST", "/crm;v=2/deals"},
		{"POST", "/crm/%64eals"},
		{"POST", "/CRM/Deals"},
		{"POST", "//crm//deals"},
		{"POST", "/crm/./deals"},
	}
	for i, s := range spellings {
		w := serve(h, up.next, s.method, s.path, `{"n":1}`, "Idempotency-Key", "same")
		replayed := w.Header().Get("Idempotent-Replayed") == "true"
		if w.Code != http.StatusCreated || replayed != (i > 0) {
			t.Fatalf("%s %s: %d replayed=%v, want 201 replayed=%v; body %s", s.method, s.path, w.Code, replayed, i > 0, w.Body)
		}
	}
	if n := up.calls.Load(); n != 1 {
		t.Errorf("upstream executions: %d, want 1", n)
	}
	// Other paths are other routes (or none): not guarded.
	for _, p := range []string{"/crm/deals/1", "/crm/dealsx", "/crm"} {
		w := serve(h, up.next, "POST", p, `{"n":1}`, "Idempotency-Key", "same")
		if w.Header().Get("Idempotent-Replayed") != "" || w.Code != http.StatusCreated {
			t.Errorf("POST %s: %d %v, want a pass-through 201", p, w.Code, w.Header())
		}
	}
	// Safe methods are never guarded, whatever their case.
	for _, m := range []string{"get", "GET", "options"} {
		before := up.calls.Load()
		serve(h, up.next, m, "/crm/deals", "", "Idempotency-Key", "same")
		if up.calls.Load() != before+1 {
			t.Errorf("%s was not passed through", m)
		}
	}
}

// TestDecisionPlaceholders: the decision is visible to the handlers and
// logs after the gateway as {http.idempotency.*} placeholders.
func TestDecisionPlaceholders(t *testing.T) {
	h := dealsHandler(t)
	up := &counting{}
	for i, want := range []struct{ outcome, replayed string }{{"executed", "false"}, {"replayed", "true"}} {
		req := httptest.NewRequest("POST", "/crm/deals", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		repl := caddy.NewReplacer()
		req = caddyhttp.PrepareRequest(req, repl, w, &caddyhttp.Server{})
		if err := h.ServeHTTP(w, req, caddyhttp.HandlerFunc(up.next)); err != nil {
			t.Fatal(err)
		}
		got := repl.ReplaceAll("{http.idempotency.route} {http.idempotency.outcome} {http.idempotency.replayed} {http.idempotency.record_id}", "-")
		parts := strings.Fields(got)
		if len(parts) != 4 || parts[0] != "deals" || parts[1] != want.outcome || parts[2] != want.replayed || len(parts[3]) != 32 {
			t.Errorf("request %d: placeholders %q, want deals %s %s <key id>", i, got, want.outcome, want.replayed)
		}
	}
}

// dealsHandler guards POST /crm/deals by its Idempotency-Key header.
func dealsHandler(t *testing.T) *Handler {
	h, _ := newHandler(t, `
routes:
  - name: deals
    match: { methods: [POST], path: /crm/deals }
    key: ["{header.Idempotency-Key}"]
`, testStores[0].cfg(t))
	return h
}

// TestForwardedKeyLeavesRequestHeaders: the upstream gets the key as a
// Structured Field string, on a header map of its own; the request that
// Caddy's logs write keeps the client's header names and values, so a log
// filter naming Idempotency-Key removes it.
func TestForwardedKeyLeavesRequestHeaders(t *testing.T) {
	h := dealsHandler(t)
	var upstream http.Header
	next := func(w http.ResponseWriter, r *http.Request) error {
		upstream = r.Header.Clone()
		w.WriteHeader(http.StatusCreated)
		return nil
	}
	req := httptest.NewRequest("POST", "/crm/deals", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "evt_184")
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), httptest.NewRecorder(), &caddyhttp.Server{})
	if err := h.ServeHTTP(httptest.NewRecorder(), req, caddyhttp.HandlerFunc(next)); err != nil {
		t.Fatal(err)
	}
	// Under a lower-case name (see hideReplayHints): one field all the same.
	lower := strings.ToLower("Idempotency-Key") // as a raw map key, not canonical
	if got := append(upstream["Idempotency-Key"], upstream[lower]...); len(got) != 1 || got[0] != `"evt_184"` {
		t.Errorf("upstream got Idempotency-Key %q, want the sf-string \"evt_184\"", got)
	}
	if len(req.Header) != 1 || len(req.Header["Idempotency-Key"]) != 1 || req.Header["Idempotency-Key"][0] != "evt_184" {
		t.Errorf("the client's request headers became %v, want only Idempotency-Key: evt_184", req.Header)
	}
}
