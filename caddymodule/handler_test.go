package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/guard"
	"github.com/idemgate/idemgate/internal/handlertest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
	"github.com/idemgate/idemgate/store/redis"
	"github.com/idemgate/idemgate/storepool"
)

// testStores are the stores the in-process handler tests run against.
var testStores = []struct {
	name string
	cfg  func(t *testing.T) caddy.Module
}{
	{"embedded", func(t *testing.T) caddy.Module {
		// A directory of its own gives each test its own embedded store.
		return &embedded.Module{Dir: t.TempDir()}
	}},
	{"redis", func(t *testing.T) caddy.Module {
		return &redis.Module{Addresses: []string{"redis://" + redistest.Start(t).Addr}}
	}},
}

// newHandler provisions a handler from YAML rules, with its logs observed.
func newHandler(t *testing.T, rules string, sc caddy.Module) (*Handler, *observer.ObservedLogs) {
	t.Helper()
	h, logs, err := provisionHandler(t, rules, sc, "")
	if err != nil {
		t.Fatal(err)
	}
	return h, logs
}

// provisionHandler provisions and validates a handler from YAML rules
// and the deployment secret ("" for none), with its logs observed, and
// returns the config's error.
func provisionHandler(t *testing.T, rules string, sc caddy.Module, secret string) (*Handler, *observer.ObservedLogs, error) {
	t.Helper()
	parsed, err := config.Parse("routes.yaml", []byte(rules), config.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	h := &Handler{Rules: *parsed, Store: storeJSON(sc), Secret: secret}
	err = h.Provision(ctx)
	t.Cleanup(func() { _ = h.Cleanup() })
	if err == nil {
		err = h.Validate()
	}
	if err != nil {
		return nil, nil, err
	}
	core, logs := observer.New(zap.DebugLevel)
	h.gate.Logger = zap.New(core)
	return h, logs, nil
}

// shortOpTimeout gives a test store an op_timeout of 500ms, which a 1s
// lease (the shortest) must outlast.
func shortOpTimeout(sc caddy.Module) caddy.Module {
	switch m := sc.(type) {
	case *embedded.Module:
		m.OpTimeout = caddy.Duration(500 * time.Millisecond)
	case *redis.Module:
		m.OpTimeout = caddy.Duration(500 * time.Millisecond)
	}
	return sc
}

// serve runs one request through h with next as the rest of the chain.
func serve(h *Handler, next caddyhttp.HandlerFunc, method, path, body string, headers ...string) *httptest.ResponseRecorder {
	return handlertest.Serve(h, next, method, path, body, headers...)
}

// counting is an upstream stand-in that counts executions.
type counting struct {
	calls atomic.Int64
	delay time.Duration
}

func (c *counting) next(w http.ResponseWriter, r *http.Request) error {
	n := c.calls.Add(1)
	time.Sleep(c.delay)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, err := fmt.Fprintf(w, `{"id":"D-%d"}`, n)
	return err
}

// TestLeaseRenewedWhileCallRuns: a call three times longer than its lease
// keeps its claim; a duplicate in the meantime gets 409, never a second
// execution, and replays the result afterwards.
func TestLeaseRenewedWhileCallRuns(t *testing.T) {
	t.Parallel()
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			sc := shortOpTimeout(st.cfg(t))
			h, _ := newHandler(t, `
routes:
  - name: slow
    match: { path: /slow }
    key: ["{header.Idempotency-Key}"]
    lock_lease: 1s
`, sc)
			up := &counting{delay: 3 * time.Second}
			first := make(chan *httptest.ResponseRecorder, 1)
			go func() { first <- serve(h, up.next, "POST", "/slow", "{}", "Idempotency-Key", "k1") }()
			for _, at := range []time.Duration{1500 * time.Millisecond, 1000 * time.Millisecond} {
				time.Sleep(at)
				// In flight, not taken for a dead call (outcome unknown).
				if w := serve(h, up.next, "POST", "/slow", "{}", "Idempotency-Key", "k1"); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "#in-flight") {
					t.Fatalf("duplicate during the call: %d %s, want 409 in-flight", w.Code, w.Body)
				}
			}
			if w := <-first; w.Code != http.StatusCreated {
				t.Fatalf("first: %d", w.Code)
			}
			w := serve(h, up.next, "POST", "/slow", "{}", "Idempotency-Key", "k1")
			if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != `{"id":"D-1"}` {
				t.Errorf("after the call: %d %q %s", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
			}
			if n := up.calls.Load(); n != 1 {
				t.Errorf("executions = %d, want 1", n)
			}
		})
	}
}

// TestFingerprintRuleChange: a record keeps the fingerprint rule that made
// it, so a handler with a changed rule still replays a genuine retry, and
// still rejects a real payload change.
func TestFingerprintRuleChange(t *testing.T) {
	t.Parallel()
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			sc := st.cfg(t)
			const before = `
routes:
  - name: pay
    match: { path: /pay }
    key: ["{header.Idempotency-Key}"]
`
			const after = `
routes:
  - name: pay
    match: { path: /pay }
    key: ["{header.Idempotency-Key}"]
    fingerprint:
      body: [amount]
`
			old, _ := newHandler(t, before, sc)
			up := &counting{}
			serve(old, up.next, "POST", "/pay", `{"amount":5,"note":"x"}`, "Idempotency-Key", "p1")
			changed, _ := newHandler(t, after, sc)
			if w := serve(changed, up.next, "POST", "/pay", `{"note":"x","amount":5}`, "Idempotency-Key", "p1"); w.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("genuine retry after the rule changed: %d %s, want a replay", w.Code, w.Body)
			}
			if w := serve(changed, up.next, "POST", "/pay", `{"amount":5,"note":"y"}`, "Idempotency-Key", "p1"); w.Code != http.StatusUnprocessableEntity {
				t.Errorf("changed payload under the old rule: %d, want 422", w.Code)
			}
			if n := up.calls.Load(); n != 1 {
				t.Errorf("executions = %d, want 1", n)
			}
		})
	}
}

// TestNoSecretsInLogs: keys, Authorization values and body fields never
// reach the log.
func TestNoSecretsInLogs(t *testing.T) {
	t.Parallel()
	h, logs := newHandler(t, `
routes:
  - name: pay
    match: { path: /pay }
    key: ["{header.Idempotency-Key}"]
`, testStores[0].cfg(t))
	up := &counting{}
	const secret = "s3cr3t-TOKEN-42"
	for _, body := range []string{`{"card":"` + secret + `"}`, `{"card":"other-` + secret + `"}`} {
		serve(h, up.next, "POST", "/pay", body, "Idempotency-Key", "key-"+secret, "Authorization", "Bearer "+secret)
	}
	serve(h, up.next, "POST", "/pay", `{"card":`, "Authorization", "Bearer "+secret)
	if logs.Len() == 0 {
		t.Fatal("no decision was logged")
	}
	for _, entry := range logs.All() {
		line := entry.Message
		for _, f := range entry.Context {
			line += fmt.Sprintf(" %s=%v%s", f.Key, f.String, f.Interface)
		}
		if strings.Contains(line, secret) {
			t.Errorf("log line contains the secret: %s", line)
		}
	}
}

// TestConcurrentDuplicatesInProcess races 50 goroutines with one key
// through the handler itself (race detector on): one execution.
func TestConcurrentDuplicatesInProcess(t *testing.T) {
	t.Parallel()
	for _, st := range testStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`, st.cfg(t))
			up := &counting{delay: 50 * time.Millisecond}
			var wg sync.WaitGroup
			codes := make([]int, 50)
			for i := range codes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					codes[i] = serve(h, up.next, "POST", "/deals", `{"a":1}`, "Idempotency-Key", "race").Code
				}()
			}
			wg.Wait()
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("executions = %d, want 1", n)
			}
			for _, c := range codes {
				if c != http.StatusCreated && c != http.StatusConflict {
					t.Errorf("status %d", c)
				}
			}
			rec, err := h.gate.Store.Get(context.Background(), findID(t, h))
			if err != nil || rec == nil || rec.State != store.StateCompleted || rec.Executions != 1 || rec.Attempts != 50 {
				t.Errorf("record = %+v, %v; want completed, 1 execution, 50 attempts", rec, err)
			}
		})
	}
}

// findID returns the id of the only record in h's store.
func findID(t *testing.T, h *Handler) string {
	t.Helper()
	page, err := h.gate.Store.List(context.Background(), store.ListFilter{Limit: 10})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("records %+v, %v; want exactly one", page.Records, err)
	}
	return page.Records[0].ID
}

// TestDecisionOnSpan: with tracing on, the decision is set on the
// request's span.
func TestDecisionOnSpan(t *testing.T) {
	t.Parallel()
	h, _ := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`, testStores[0].cfg(t))
	recorder := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)).Tracer("test")
	up := &counting{}
	for range 2 {
		ctx, span := tracer.Start(context.Background(), "request")
		req := httptest.NewRequest("POST", "/deals", strings.NewReader("{}")).WithContext(ctx)
		req.Header.Set("Idempotency-Key", "traced")
		w := httptest.NewRecorder()
		req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), w, &caddyhttp.Server{})
		if err := h.ServeHTTP(w, req, caddyhttp.HandlerFunc(up.next)); err != nil {
			t.Fatal(err)
		}
		span.End()
	}
	spans := recorder.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, want := range []string{guard.OutcomeExecuted, guard.OutcomeReplayed} {
		attrs := map[string]string{}
		for _, kv := range spans[i].Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if attrs["idempotency.outcome"] != want || attrs["idempotency.route"] != "deals" || len(attrs["idempotency.record_id"]) != 32 ||
			attrs["idempotency.replayed"] != fmt.Sprint(want == guard.OutcomeReplayed) {
			t.Errorf("span %d attributes = %v, want exchange.Result %s", i, attrs, want)
		}
	}
}

// storeJSON is the handler's "store" field for the store module m; nil
// (the default store) for none.
func storeJSON(m caddy.Module) json.RawMessage {
	if m == nil {
		return nil
	}
	return caddyconfig.JSONModuleObject(m, "engine", storepool.EngineName(m), nil)
}

// TestResolveCheckMatch: the claim keeps found.match resolved from the
// request, as text; a match value that is empty, too long or not UTF-8
// leaves the record without a check (held for an operator).
func TestResolveCheckMatch(t *testing.T) {
	u, _ := keying.ParseURLTemplate("http://crm/deals?source_key={key}")
	rt := &route{Resolved: config.Resolved{Name: "r", Verify: &config.VerifyRule{
		URL: u, Method: "GET", After: time.Second,
		FoundMatch: []config.VerifyMatch{
			{Path: "0.event", Value: keying.MustParseMatchTemplate("{body.id}")},
			{Path: "0.source_key", Value: keying.MustParseMatchTemplate("{key}")},
		},
	}}}
	h := &Handler{gate: guard.Gate{Logger: zap.NewNop()}}
	in := keying.NewInput("POST", nil, "", []byte(`{"id":"evt 1/ä"}`))
	got := h.resolveCheck(rt, "k&1", "0123", in)
	want := store.Check{Method: "GET", URL: "http://crm/deals?source_key=k%261", After: time.Second,
		Match: []store.CheckMatch{{Path: "0.event", Value: "evt 1/ä"}, {Path: "0.source_key", Value: "k&1"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resolveCheck:\n got %+v\nwant %+v", got, want)
	}
	for name, body := range map[string]string{
		"empty":     `{"id":""}`,
		"missing":   `{}`,
		"too long":  `{"id":"` + strings.Repeat("x", store.MaxCheckMatchValue+1) + `"}`,
		"not UTF-8": "{\"id\":\"\xff\"}",
	} {
		if c := h.resolveCheck(rt, "k", "0123", keying.NewInput("POST", nil, "", []byte(body))); !c.IsZero() {
			t.Errorf("%s: a check %+v, want none", name, c)
		}
	}
}
