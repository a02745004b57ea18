package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/idemgate/idemgate/store/embedded"
)

// The memory tests send a 50 MiB request body or upstream response through
// the handler and measure, with the runtime's own counters, what the
// handler holds: the live heap (after a GC) sampled every MiB of the stream
// and at the end, minus the live heap before. It must stay within
// max_body (request) or max_response (response) plus a constant, whatever
// the size of the stream. TotalAlloc (every byte allocated, garbage
// included) is bounded too, so no copy of the stream is ever made.

const (
	memMax    = 1 << 20  // max_body and max_response
	memStream = 50 << 20 // the request or response
	memSlack  = 1 << 19  // the constant: pools, the store client, the test's own samples
	// memAllocated bounds every byte allocated while one request is served:
	// a bounded buffer grown by doubling (at most twice its bound in all)
	// and the embedded store's own work (its Lua interpreter is built
	// afresh for every script), never anything near the stream's size.
	memAllocated = 2*memMax + 1<<20
)

const memRules = `
defaults:
  max_body: 1MiB
  max_response: 1MiB
routes:
  - name: create_deal
    match: { methods: [POST], path: /v1/deals }
    key: ["{header.Idempotency-Key}"]
`

// heapMeter samples the live heap.
type heapMeter struct {
	base, peak uint64
	total0     uint64
}

func liveHeap() (live, total uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.TotalAlloc
}

func newHeapMeter() *heapMeter {
	m := &heapMeter{}
	m.base, m.total0 = liveHeap()
	m.peak = m.base
	return m
}

func (m *heapMeter) sample() {
	if live, _ := liveHeap(); live > m.peak {
		m.peak = live
	}
}

// held is the highest live heap seen above the start; allocated is every
// byte allocated since the start.
func (m *heapMeter) result() (held, allocated int64) {
	m.sample()
	_, total := liveHeap()
	return int64(m.peak) - int64(m.base), int64(total - m.total0)
}

// patternReader yields n bytes of 'x' without holding them, sampling the
// heap every MiB it has given out.
type patternReader struct {
	left, read int64
	meter      *heapMeter
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	n := int64(len(b))
	n = min(n, p.left, 32<<10)
	for i := range b[:n] {
		b[i] = 'x'
	}
	before := p.read
	p.left -= n
	p.read += n
	if p.meter != nil && before>>20 != p.read>>20 {
		p.meter.sample()
	}
	return int(n), nil
}

func (p *patternReader) Close() error { return nil }

// countingWriter is a client that counts the body it receives and samples
// the heap every MiB.
type countingWriter struct {
	header http.Header
	status int
	n      int64
	meter  *heapMeter
}

func (w *countingWriter) Header() http.Header { return w.header }
func (w *countingWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}
func (w *countingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	before := w.n
	w.n += int64(len(p))
	if w.meter != nil && before>>20 != w.n>>20 {
		w.meter.sample()
	}
	return len(p), nil
}

func memRequest(key string, body io.ReadCloser, length int64, w http.ResponseWriter) *http.Request {
	req := httptest.NewRequest("POST", "/v1/deals", nil)
	req.Body = body
	req.ContentLength = length
	req.Header.Set("Idempotency-Key", key)
	if length >= 0 {
		req.Header.Set("Content-Length", strconv.FormatInt(length, 10))
	} else {
		req.TransferEncoding = []string{"chunked"}
	}
	return caddyhttp.PrepareRequest(req, caddy.NewReplacer(), w, &caddyhttp.Server{})
}

// TestMemoryLargeRequest: a 50 MiB request body is refused with 413 and
// never held: with a Content-Length the handler reads none of it; without
// one (chunked) it reads at most max_body+1 bytes. A body of exactly
// max_body is held once, at its size.
func TestMemoryLargeRequest(t *testing.T) {
	h := newBenchHandler(t, memRules, &embedded.Module{Dir: t.TempDir()})
	tests := []struct {
		name     string
		size     int64
		declared bool // Content-Length set
		status   int
		maxRead  int64
		maxHeld  int64
	}{
		{"50MiB with Content-Length", memStream, true, http.StatusRequestEntityTooLarge, 0, memSlack},
		{"50MiB chunked", memStream, false, http.StatusRequestEntityTooLarge, memMax + 1, memMax + memSlack},
		{"max_body with Content-Length", memMax, true, http.StatusCreated, memMax, memMax + memSlack},
		{"max_body chunked", memMax, false, http.StatusCreated, memMax, memMax + memSlack},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var upstreamRead int64
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				n, err := io.Copy(io.Discard, r.Body)
				upstreamRead = n
				if err != nil {
					return err
				}
				w.WriteHeader(http.StatusCreated)
				return nil
			})
			w := &countingWriter{header: http.Header{}}
			body := &patternReader{left: tt.size}
			length := int64(-1)
			if tt.declared {
				length = tt.size
			}
			req := memRequest("req-"+strconv.Itoa(i), body, length, w)
			m := newHeapMeter()
			body.meter = m
			if err := h.ServeHTTP(w, req, next); err != nil {
				t.Fatal(err)
			}
			held, allocated := m.result()
			t.Logf("status %d, read %d bytes, held %d KiB, allocated %d KiB", w.status, body.read, held>>10, allocated>>10)
			if w.status != tt.status {
				t.Fatalf("status %d, want %d", w.status, tt.status)
			}
			if body.read > tt.maxRead {
				t.Errorf("read %d bytes of the body, want at most %d", body.read, tt.maxRead)
			}
			if tt.status == http.StatusCreated && upstreamRead != tt.size {
				t.Errorf("upstream got %d bytes, want %d", upstreamRead, tt.size)
			}
			if held > tt.maxHeld {
				t.Errorf("held %d bytes, want at most %d (max_body %d + %d)", held, tt.maxHeld, memMax, tt.maxHeld-memMax)
			}
			if allocated > memAllocated {
				t.Errorf("allocated %d bytes in all, want at most %d", allocated, memAllocated)
			}
		})
	}
}

// TestMemoryLargeResponse: a 50 MiB upstream response reaches the client
// whole while the handler keeps at most max_response of it (with a
// Content-Length above max_response, none), and the record keeps status,
// headers and digest without the body.
func TestMemoryLargeResponse(t *testing.T) {
	h := newBenchHandler(t, memRules, &embedded.Module{Dir: t.TempDir()})
	chunk := bytes.Repeat([]byte("y"), 32<<10)
	tests := []struct {
		name     string
		declared bool
		maxHeld  int64
	}{
		{"50MiB with Content-Length", true, memSlack},
		{"50MiB streamed", false, memMax + memSlack},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				if tt.declared {
					w.Header().Set("Content-Length", strconv.Itoa(memStream))
				}
				w.Header().Set("Content-Type", "application/octet-stream")
				w.WriteHeader(http.StatusOK)
				for range memStream / len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						return err
					}
				}
				return nil
			})
			key := "resp-" + strconv.Itoa(i)
			body := io.NopCloser(bytes.NewReader([]byte(`{}`)))
			w := &countingWriter{header: http.Header{}}
			req := memRequest(key, body, 2, w)
			m := newHeapMeter()
			w.meter = m
			if err := h.ServeHTTP(w, req, next); err != nil {
				t.Fatal(err)
			}
			held, allocated := m.result()
			t.Logf("client got %d bytes, held %d KiB, allocated %d KiB", w.n, held>>10, allocated>>10)
			if w.status != http.StatusOK || w.n != memStream {
				t.Fatalf("client got status %d and %d bytes, want 200 and %d", w.status, w.n, memStream)
			}
			if held > tt.maxHeld {
				t.Errorf("held %d bytes, want at most %d", held, tt.maxHeld)
			}
			if allocated > memAllocated {
				t.Errorf("allocated %d bytes in all, want at most %d", allocated, memAllocated)
			}
			// The replay: status and headers, no body.
			w2 := &countingWriter{header: http.Header{}}
			req2 := memRequest(key, io.NopCloser(bytes.NewReader([]byte(`{}`))), 2, w2)
			if err := h.ServeHTTP(w2, req2, next); err != nil {
				t.Fatal(err)
			}
			if w2.status != http.StatusOK || w2.n != 0 || w2.header.Get("Idempotent-Body-Omitted") != "true" {
				t.Errorf("replay: status %d, %d body bytes, headers %v", w2.status, w2.n, w2.header)
			}
		})
	}
}
