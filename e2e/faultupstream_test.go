package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// faultUpstream is a business API with injectable faults. It counts every
// call it gets by the forwarded Idempotency-Key: that count is the number of
// business executions a fault test reasons about. A call counts as soon as
// the request has been read, before any fault is injected (the side effect
// has happened).
//
// Paths:
//
//	/ok/...       201 {"id":"D-<n>","key":...}
//	/slow/...     waits for the key's gate, then 201
//	/drop/...     acts, then closes the connection without an answer (FIN)
//	/reset/...    acts, then resets the connection (RST)
//	/held-reset/... acts, waits for the key's gate, then resets
//	/partial/...  acts, sends 201 and part of the body, then breaks off
//	/validate/... 400 unless the JSON body has a positive "amount", else 201
//	/fail/...     500
//	/flaky/...    500 on a key's first call, 201 afterwards
type faultUpstream struct {
	addr string // 127.0.0.1:port, fixed for the upstream's lifetime

	calls counter // by Idempotency-Key
	gates gates   // by Idempotency-Key

	mu  sync.Mutex
	srv *http.Server
}

// newFaultUpstream starts a fault upstream on a free port.
func newFaultUpstream(t testing.TB) *faultUpstream {
	t.Helper()
	u := newFaultUpstreamDown(t)
	u.listen(t)
	return u
}

// newFaultUpstreamDown reserves a free port for an upstream that is not
// listening yet: connections to addr are refused until listen.
func newFaultUpstreamDown(t testing.TB) *faultUpstream {
	t.Helper()
	u := &faultUpstream{
		addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
	}
	t.Cleanup(u.close)
	return u
}

// listen starts serving on u.addr.
func (u *faultUpstream) listen(t testing.TB) {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	// The port was free when reserved; a just-closed listener may take a
	// moment to be reusable.
	for range 50 {
		if ln, err = net.Listen("tcp", u.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("fault upstream: listen on %s: %v", u.addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(u.serve), ReadHeaderTimeout: 10 * time.Second}
	u.mu.Lock()
	u.srv = srv
	u.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (u *faultUpstream) close() {
	u.mu.Lock()
	srv := u.srv
	u.srv = nil
	u.mu.Unlock()
	u.gates.openAll()
	if srv != nil {
		_ = srv.Close()
	}
}

// executions is how often the upstream acted for key.
func (u *faultUpstream) executions(key string) int { return u.calls.count(key) }

// totalExecutions counts the upstream's calls for every key.
func (u *faultUpstream) totalExecutions() int { return u.calls.sum() }

// gate makes calls for key wait (after they acted) until open is called.
func (u *faultUpstream) gate(key string) (open func()) { return u.gates.gate(key) }

func (u *faultUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the request never fully arrived: no side effect
	}
	key := forwardedKey(r)
	n, _ := u.calls.add(key)

	kind, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch kind {
	case "slow":
		u.gates.wait(key, r.Context().Done(), 10*time.Second)
		faultCreated(w, key, n)
	case "drop", "reset", "held-reset":
		if kind == "held-reset" {
			u.gates.wait(key, r.Context().Done(), 10*time.Second)
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		if tcp, ok := conn.(*net.TCPConn); ok && kind != "drop" {
			_ = tcp.SetLinger(0) // close sends RST instead of FIN
		}
		_ = conn.Close()
	case "partial":
		// Status and the start of the body go out, then the connection
		// breaks: the response is cut short.
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"D-`)
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	case "validate":
		var in struct {
			Amount json.Number `json:"amount"`
		}
		amount, convErr := float64(0), errors.New("missing")
		if json.Unmarshal(body, &in) == nil && in.Amount != "" {
			amount, convErr = in.Amount.Float64()
		}
		if convErr != nil || amount <= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":"amount must be a positive number","call":%d}`, n)
			return
		}
		faultCreated(w, key, n)
	case "fail":
		faultFailed(w, n)
	case "flaky":
		if n == 1 {
			faultFailed(w, n)
			return
		}
		faultCreated(w, key, n)
	default:
		faultCreated(w, key, n)
	}
}

func faultCreated(w http.ResponseWriter, key string, n int) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Upstream-Call", strconv.Itoa(n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"D-%d","key":%q,"call":%d}`, 9020+n, key, n)
}

func faultFailed(w http.ResponseWriter, n int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusInternalServerError)
	fmt.Fprintf(w, `{"error":"database unavailable","call":%d}`, n)
}
