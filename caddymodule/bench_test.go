package caddymodule

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store/embedded"
	"github.com/idemgate/idemgate/store/redis"
)

// The handler benchmarks run one request at a time through the handler with
// an in-memory next (an upstream that answers 201 with a 300-byte JSON
// body), on the embedded store and on a real redis-server. ns/op includes
// the store's round trips; allocs/op is the handler's own plus what
// go-redis allocates for the calls. The harness reuses the request, its
// header map, its body and the response writer, so they cost nothing per
// request, except the execute path's fresh key (one string).

const benchRules = `
routes:
  - name: create_deal
    match: { methods: [POST], path: /v1/deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
  - name: observed_deal
    match: { methods: [POST], path: /v1/observed }
    key: ["{header.Idempotency-Key}"]
    external_id: id
    mode: observe
`

// benchRequestBody is the same JSON body as the load benchmark's (bench/).
const benchRequestBody = `{"title":"Acme Corp annual renewal","amount":4200,"currency":"EUR",` +
	`"customer_id":"cus_9s6XKzkNRiz8i3","owner":"sales-emea-7","stage":"closed_won",` +
	`"items":[{"sku":"SKU-00017","qty":3,"price":1200.00,"note":"platform licence"},` +
	`{"sku":"SKU-00042","qty":1,"price":600.00,"note":"onboarding"}],` +
	`"meta":{"source":"crm-webhooks","delivery_attempt":1,"trace":"5b8aa5a2d2c872e8321cf37308d69df2"},` +
	`"notes":"renewal negotiated by the regional team; invoice quarterly; net 30; contact finance@acme.example"}`

var benchRequestBytes = []byte(benchRequestBody)

var benchResponseBody = []byte(`{"id":"D-1","title":"Acme Corp annual renewal","amount":4200,"currency":"EUR",` +
	`"customer_id":"cus_9s6XKzkNRiz8i3","owner":"sales-emea-7","stage":"closed_won",` +
	`"created_at":"2026-12-01T04:41:05Z","links":{"self":"/v1/deals/D-1"},"status":"created"}`)

var benchUpstreamHeader = http.Header{
	"Content-Type":   {"application/json"},
	"Location":       {"/v1/deals/D-1"},
	"Content-Length": {strconv.Itoa(len(benchResponseBody))},
}

// benchNext is the in-memory upstream.
func benchNext(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	for k, v := range benchUpstreamHeader {
		h[k] = v
	}
	w.WriteHeader(http.StatusCreated)
	_, err := w.Write(benchResponseBody)
	return err
}

// benchStores are the stores the handler benchmarks run on.
var benchStores = []struct {
	name string
	cfg  func(b *testing.B) caddy.Module
}{
	{"embedded", func(b *testing.B) caddy.Module {
		return &embedded.Module{Dir: b.TempDir()}
	}},
	{"redis", func(b *testing.B) caddy.Module {
		return &redis.Module{Addresses: []string{"redis://" + redistest.Start(b).Addr}}
	}},
}

// newBenchHandler provisions a handler with logging at Info level into a
// discarding core, so the decision line is encoded as in production.
func newBenchHandler(tb testing.TB, rules string, sc caddy.Module) *Handler {
	tb.Helper()
	parsed, err := config.Parse("routes.yaml", []byte(rules), config.Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	tb.Cleanup(cancel)
	h := &Handler{Rules: *parsed, Store: storeJSON(sc)}
	if err := h.Provision(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Cleanup() })
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	h.gate.Logger = zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	return h
}

// benchConn is one reusable request and response writer.
type benchConn struct {
	req    *http.Request
	body   *bytes.Reader
	key    []string // the Idempotency-Key header's value slice
	header http.Header
	w      *discardWriter
}

func newBenchConn(path string) *benchConn {
	c := &benchConn{body: bytes.NewReader(nil), key: []string{""}, w: &discardWriter{header: http.Header{}}}
	req := httptest.NewRequest("POST", path, nil)
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), c.w, &caddyhttp.Server{})
	c.header = http.Header{
		"Content-Type":  {"application/json"},
		"Authorization": {"Bearer sk_bench_4f1c9a"},
	}
	c.req = req
	return c
}

// serve sends one request with key through h (the upstream: benchNext)
// and returns the status.
func (c *benchConn) serve(tb testing.TB, h *Handler, key string) int {
	return c.serveWith(tb, h, key, benchNext)
}

// serveWith is serve with another upstream.
func (c *benchConn) serveWith(tb testing.TB, h *Handler, key string, next caddyhttp.HandlerFunc) int {
	status, err := c.do(h, key, next)
	if err != nil {
		tb.Fatal(err)
	}
	return status
}

// do is serveWith for any goroutine: it returns the handler's error.
func (c *benchConn) do(h *Handler, key string, next caddyhttp.HandlerFunc) (int, error) {
	r := c.req
	// Undo what the handler did to the request last time.
	delete(c.header, "idempotency-key")
	delete(c.header, "Content-Length")
	c.key[0] = key
	c.header["Idempotency-Key"] = c.key
	r.Header = c.header
	c.body.Reset(benchRequestBytes)
	r.Body = readCloser{c.body}
	r.ContentLength = int64(len(benchRequestBody))
	r.GetBody = nil
	clear(c.w.header)
	c.w.status, c.w.n = 0, 0
	err := h.ServeHTTP(c.w, r, next)
	return c.w.status, err
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	header http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header { return w.header }
func (w *discardWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

var benchSeq atomic.Int64

// processCPU returns the CPU time this process has used (all goroutines:
// the handler, the Redis client, the runtime and the GC).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerOp reports the process's CPU time per operation as cpu-ns/op: on a
// shared machine it moves much less than ns/op, which includes waiting for
// Redis and for the CPU.
func cpuPerOp(b *testing.B, began time.Duration) {
	b.ReportMetric(float64(processCPU()-began)/float64(b.N), "cpu-ns/op")
}

// BenchmarkHandler is one guarded request end to end in process:
// execute (new key: claim, next, complete), replay (a completed key: one
// claim returning the record), conflict (a key held as outcome unknown:
// one claim, 409) and passthrough (no route matches).
func BenchmarkHandler(b *testing.B) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			h := newBenchHandler(b, benchRules, st.cfg(b))
			prefix := "bench-" + strconv.FormatInt(benchSeq.Add(1), 10) + "-"
			c := newBenchConn("/v1/deals")

			b.Run("execute", func(b *testing.B) {
				b.ReportAllocs()
				defer cpuPerOp(b, processCPU())
				buf := []byte(prefix + "x-")
				n := len(buf)
				for b.Loop() {
					// Keys come from a process-wide counter: the testing
					// package may run this function more than once.
					buf = strconv.AppendInt(buf[:n], benchSeq.Add(1), 10)
					if s := c.serve(b, h, string(buf)); s != http.StatusCreated {
						b.Fatalf("execute: status %d", s)
					}
				}
			})

			const replayKeys = 64
			keys := make([]string, replayKeys)
			for i := range keys {
				keys[i] = prefix + "r-" + strconv.Itoa(i)
				if s := c.serve(b, h, keys[i]); s != http.StatusCreated {
					b.Fatalf("priming: status %d", s)
				}
			}
			b.Run("replay", func(b *testing.B) {
				b.ReportAllocs()
				defer cpuPerOp(b, processCPU())
				i := 0
				for b.Loop() {
					i++
					if s := c.serve(b, h, keys[i%replayKeys]); s != http.StatusCreated || c.w.header.Get("Idempotent-Replayed") != "true" {
						b.Fatalf("replay: status %d, header %v", s, c.w.header)
					}
				}
			})

			held := prefix + "held"
			fail := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				w.WriteHeader(http.StatusInternalServerError)
				return nil
			})
			if s := c.serveWith(b, h, held, fail); s != http.StatusInternalServerError {
				b.Fatalf("priming a held record: status %d", s)
			}
			b.Run("conflict", func(b *testing.B) {
				b.ReportAllocs()
				defer cpuPerOp(b, processCPU())
				for b.Loop() {
					if s := c.serve(b, h, held); s != http.StatusConflict {
						b.Fatalf("conflict: status %d", s)
					}
				}
			})

			p := newBenchConn("/v1/notes")
			b.Run("passthrough", func(b *testing.B) {
				b.ReportAllocs()
				defer cpuPerOp(b, processCPU())
				for b.Loop() {
					if s := p.serve(b, h, "k"); s != http.StatusCreated {
						b.Fatalf("passthrough: status %d", s)
					}
				}
			})
		})
	}
}

// BenchmarkProblemWrite is the 409 answer of the conflict path.
func BenchmarkProblemWrite(b *testing.B) {
	w := &discardWriter{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.header)
		w.status = 0
		p := problem.Unknown.With("an earlier attempt reached the upstream but its outcome is not known; an operator must release or complete record 0123456789abcdef0123456789abcdef", "create_deal")
		p.RecordID = "0123456789abcdef0123456789abcdef"
		if err := p.Write(w); err != nil || w.status != http.StatusConflict {
			b.Fatal(err, w.status)
		}
	}
}
