package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/handlertest"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keying"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
	"github.com/idemgate/idemgate/store/redis"
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
	h.logger = zap.New(core)
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

func TestClassify(t *testing.T) {
	t.Parallel()
	// "callResult{...}" fields: verdict, status, reason, cut off.
	rt := &route{retry: map[int]bool{429: true, 503: true}}
	dial := caddyhttp.Error(http.StatusBadGateway, reverseproxy.DialError{})
	timeout := caddyhttp.Error(http.StatusGatewayTimeout, errors.New("net/http: timeout awaiting response headers"))
	cases := []struct {
		name     string
		status   int
		err      error
		panicked any
		want     callResult
	}{
		{"stored 201", 201, nil, nil, callResult{verdictComplete, 201, "", false}},
		{"stored 400", 400, nil, nil, callResult{verdictComplete, 400, "", false}},
		{"nothing written", 0, nil, nil, callResult{verdictComplete, 200, "", false}},
		{"retry status 429", 429, nil, nil, callResult{verdictRelease, 429, "retry_status", false}},
		{"retry status 503", 503, nil, nil, callResult{verdictRelease, 503, "retry_status", false}},
		{"temporary redirect", 307, nil, nil, callResult{verdictRelease, 307, "redirect", false}},
		{"permanent redirect", 308, nil, nil, callResult{verdictRelease, 308, "redirect", false}},
		{"moved permanently is a result", 301, nil, nil, callResult{verdictComplete, 301, "", false}},
		{"found is a result", 302, nil, nil, callResult{verdictComplete, 302, "", false}},
		{"see other is a result", 303, nil, nil, callResult{verdictComplete, 303, "", false}},
		{"upstream 500", 500, nil, nil, callResult{verdictUnknown, 500, "upstream_5xx", false}},
		{"upstream 502", 502, nil, nil, callResult{verdictUnknown, 502, "upstream_5xx", false}},
		{"client closed", 499, nil, nil, callResult{verdictUnknown, 499, "client_closed", true}},
		{"switching protocols", 101, nil, nil, callResult{verdictRelease, 101, "switching_protocols", false}},
		{"dial error: never sent", 0, dial, nil, callResult{verdictRelease, 502, "not_sent", false}},
		{"no upstreams", 0, caddyhttp.Error(503, errors.New("no upstreams available")), nil, callResult{verdictRelease, 503, "not_sent", false}},
		{"timeout after sending", 0, timeout, nil, callResult{verdictUnknown, 504, "upstream_error", true}},
		{"aborted body", 200, nil, http.ErrAbortHandler, callResult{verdictUnknown, 200, "response_aborted", true}},
		{"error after the status", 200, caddyhttp.Error(502, errors.New("reading body: unexpected EOF")), nil, callResult{verdictUnknown, 502, "upstream_error", true}},
		{"panic before the status", 0, nil, http.ErrAbortHandler, callResult{verdictUnknown, 0, "response_aborted", true}},
	}
	short := &capture{status: 200, declared: 1000, size: 500}
	if got, want := classify(rt, short, nil, nil), (callResult{verdictUnknown, 200, "response_cut_off", true}); got != want {
		t.Errorf("a body shorter than its Content-Length: classify = %+v, want %+v", got, want)
	}
	stored := &route{Resolved: config.Resolved{OnRedirect: config.OnRedirectStore}}
	for _, code := range []int{307, 308} {
		if got, want := classify(stored, &capture{status: code, declared: -1}, nil, nil), (callResult{verdictComplete, code, "", false}); got != want {
			t.Errorf("%d under on_redirect: store: classify = %+v, want %+v", code, got, want)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cw := &capture{status: tc.status, declared: -1}
			if got := classify(rt, cw, tc.err, tc.panicked); got != tc.want {
				t.Errorf("classify = %+v, want %+v", got, tc.want)
			}
		})
	}
}

type failingWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	f.writes++
	if f.writes > 1 {
		return 0, errors.New("client gone")
	}
	return f.ResponseRecorder.Write(p)
}

func TestCapture(t *testing.T) {
	t.Parallel()
	t.Run("within the limit", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := newCapture(rec, 10)
		c.Header().Set("Content-Type", "text/plain")
		c.WriteHeader(201)
		_, _ = c.Write([]byte("hello"))
		_ = c.FlushError()
		_, _ = c.Write([]byte("world"))
		if c.overflow || string(c.body()) != "helloworld" || c.status != 201 {
			t.Errorf("overflow=%v body=%q status=%d", c.overflow, c.body(), c.status)
		}
		// Held back until the result is recorded: the client has nothing yet.
		if rec.Body.Len() != 0 || rec.Flushed || c.passing {
			t.Errorf("before deliver the client got %q (flushed %v)", rec.Body, rec.Flushed)
		}
		c.deliver()
		if rec.Code != 201 || rec.Body.String() != "helloworld" || rec.Header().Get("Content-Type") != "text/plain" {
			t.Errorf("delivered %d %q", rec.Code, rec.Body)
		}
	})
	t.Run("trailers stay trailers when a held answer is delivered", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := newCapture(rec, 100)
		c.Header().Set("Trailer", "X-Checksum")
		c.WriteHeader(200)
		_, _ = c.Write([]byte("body"))
		c.Header().Set("X-Checksum", "abc") // reverse_proxy copies trailers after the body
		c.deliver()
		res := rec.Result()
		if res.Header.Get("X-Checksum") != "" || res.Trailer.Get("X-Checksum") != "abc" {
			t.Errorf("header %q, trailer %q; want the value as a trailer only", res.Header.Get("X-Checksum"), res.Trailer.Get("X-Checksum"))
		}
	})
	t.Run("growing past the limit sends what was held, then streams", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := newCapture(rec, 8)
		c.WriteHeader(200)
		_, _ = c.Write([]byte("12345"))
		if rec.Body.Len() != 0 {
			t.Fatalf("within the limit the client got %q", rec.Body)
		}
		_, _ = c.Write([]byte("6789"))
		if !c.overflow || !c.passing || rec.Body.String() != "123456789" {
			t.Fatalf("past the limit: overflow=%v passing=%v client %q", c.overflow, c.passing, rec.Body)
		}
		c.deliver() // nothing more to send
		if rec.Body.String() != "123456789" {
			t.Errorf("deliver after streaming sent more: %q", rec.Body)
		}
	})
	t.Run("over the limit streams and keeps the digest", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := newCapture(rec, 8)
		data := bytes.Repeat([]byte("0123456789"), 5)
		for i := 0; i < len(data); i += 7 {
			_, _ = c.Write(data[i:min(i+7, len(data))])
		}
		full := newCapture(httptest.NewRecorder(), 1<<20)
		_, _ = full.Write(data)
		if !c.overflow || c.body() != nil || !bytes.Equal(rec.Body.Bytes(), data) || !bytes.Equal(c.sum(), full.sum()) {
			t.Errorf("overflow=%v body=%q client=%d bytes", c.overflow, c.body(), rec.Body.Len())
		}
	})
	t.Run("a client that went away does not stop the capture", func(t *testing.T) {
		fw := &failingWriter{ResponseRecorder: httptest.NewRecorder()}
		c := newCapture(fw, 100)
		for _, part := range []string{"a", "b", "c"} {
			if n, err := c.Write([]byte(part)); n != 1 || err != nil {
				t.Fatalf("Write = %d, %v; the upstream copy must go on", n, err)
			}
		}
		fw.writes = 1 // gone by the time the recorded answer is delivered
		c.deliver()
		if string(c.body()) != "abc" || c.clientErr == nil {
			t.Errorf("body=%q clientErr=%v", c.body(), c.clientErr)
		}
		// Streaming past the limit, the same.
		fw = &failingWriter{ResponseRecorder: httptest.NewRecorder()}
		c = newCapture(fw, 1)
		for _, part := range []string{"a", "b", "c"} {
			if n, err := c.Write([]byte(part)); n != 1 || err != nil {
				t.Fatalf("Write = %d, %v; the upstream copy must go on", n, err)
			}
		}
		if !c.overflow || c.size != 3 || c.clientErr == nil {
			t.Errorf("streaming: overflow=%v size=%d clientErr=%v", c.overflow, c.size, c.clientErr)
		}
	})
	t.Run("event streams are not replayable", func(t *testing.T) {
		rec := httptest.NewRecorder()
		c := newCapture(rec, 100)
		c.Header().Set("Content-Type", "text/event-stream")
		c.WriteHeader(200)
		_, _ = c.Write([]byte("data: 1\n\n"))
		_ = c.FlushError()
		if !c.streaming || !c.passing || rec.Body.String() != "data: 1\n\n" || !rec.Flushed {
			t.Errorf("event stream: streaming=%v passing=%v client %q flushed=%v; want it passed through at once", c.streaming, c.passing, rec.Body, rec.Flushed)
		}
	})
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
			rec, err := h.store.Get(context.Background(), findID(t, h))
			if err != nil || rec == nil || rec.State != store.StateCompleted || rec.Executions != 1 || rec.Attempts != 50 {
				t.Errorf("record = %+v, %v; want completed, 1 execution, 50 attempts", rec, err)
			}
		})
	}
}

// findID returns the id of the only record in h's store.
func findID(t *testing.T, h *Handler) string {
	t.Helper()
	page, err := h.store.List(context.Background(), store.ListFilter{Limit: 10})
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
	for i, want := range []string{outcomeExecuted, outcomeReplayed} {
		attrs := map[string]string{}
		for _, kv := range spans[i].Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if attrs["idempotency.outcome"] != want || attrs["idempotency.route"] != "deals" || len(attrs["idempotency.record_id"]) != 32 ||
			attrs["idempotency.replayed"] != fmt.Sprint(want == outcomeReplayed) {
			t.Errorf("span %d attributes = %v, want callResult %s", i, attrs, want)
		}
	}
}

// storeJSON is the handler's "store" field for the store module m; nil
// (the default store) for none.
func storeJSON(m caddy.Module) json.RawMessage {
	if m == nil {
		return nil
	}
	return caddyconfig.JSONModuleObject(m, "engine", engineName(m), nil)
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
	h := &Handler{logger: zap.NewNop()}
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
