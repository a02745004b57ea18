package e2e

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Flood figures: floodBodies concurrent bodies of floodBodySize bytes on
// one key, under max_buffered floodBudget. The gateway's peak RSS must
// stay under floodBudget plus bufferedOverhead: the gateway's own memory
// (about 60 MiB once it served a request), the Go runtime's heap slack
// (it lets the heap grow past its live size before it collects) and the
// connections' buffers, measured and written down in docs/capacity.md.
const (
	floodBodies      = 500
	floodBodySize    = 900_000
	floodBudget      = 64 << 20
	bufferedOverhead = 128 << 20
)

// TestBufferedBodiesBounded: 500 concurrent 900 KB bodies on one key, on
// a route whose duplicates wait for the first (on_in_flight: wait, 32
// waiters a key), hold at most max_buffered bytes of bodies at once: the
// gateway's peak RSS stays under max_buffered plus a fixed overhead
// (without the bound the flood took it from about 80 MiB to 430–500 MiB
// here). A body that would pass the budget gets 503 busy with Retry-After: 1
// before anything is claimed; the key executes once, the waiters replay
// its answer, the others get the 409 in-flight; idemgate_busy_total
// counts the 503s and idemgate_buffered_bytes is back at 0 after.
func TestBufferedBodiesBounded(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("peak RSS is read from /proc")
	}
	up := newUpstream(t)
	gw := startGateway(t, gatewayConfig{store: "embedded", upstream: up.addr(), extra: "max_buffered 64MiB", rules: `routes:
  - name: flood
    match: { path: /flood }
    key: ["{header.Idempotency-Key}"]
    on_in_flight: wait
    in_flight_wait: 30s
`})
	pid := gw.cmd.Process.Pid
	if r := send(t, "POST", gw.url+"/flood", []byte(`{}`), "Idempotency-Key", "warm-up"); r.status != http.StatusCreated {
		t.Fatalf("warm-up: %d %s", r.status, r.body)
	}
	before := peakRSS(t, pid)

	body := bytes.Repeat([]byte("x"), floodBodySize)
	arrived, open := up.gates.hold("/flood")
	t.Cleanup(open)
	first := make(chan response, 1)
	go func() { first <- send(t, "POST", gw.url+"/flood", body, "Idempotency-Key", "flood") }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach the upstream")
	}

	rs := make([]response, floodBodies)
	errs := make([]error, floodBodies)
	var answered atomic.Int64
	done := make(chan struct{})
	go func() {
		together(floodBodies, func(i int) {
			rs[i], errs[i] = do(client, "POST", gw.url+"/flood", body, "Idempotency-Key", "flood")
			answered.Add(1)
		})
		close(done)
	}()
	// Every duplicate but the waiters is answered while the first is
	// held; then the first may answer.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && answered.Load() < floodBodies-waitersPerKey; {
		time.Sleep(20 * time.Millisecond)
	}
	open()
	<-done
	if f := <-first; f.status != http.StatusCreated {
		t.Fatalf("first: %d %s", f.status, f.body)
	}
	after := peakRSS(t, pid)

	// cut: requests whose sending failed because the gateway answered
	// busy before reading their body and closed the connection, as a
	// server does with a body it will not read; the client may see its
	// write fail before it reads the 503.
	replays, conflicts, busy, cut := 0, 0, 0, 0
	for i, r := range rs {
		switch {
		case errs[i] != nil && (errors.Is(errs[i], syscall.EPIPE) || errors.Is(errs[i], syscall.ECONNRESET)):
			cut++
		case errs[i] != nil:
			t.Errorf("request %d: %v", i, errs[i])
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true":
			replays++
		case isProblem(t, r, http.StatusConflict, "in-flight", ""):
			conflicts++
		case isProblem(t, r, http.StatusServiceUnavailable, "busy", ""):
			busy++
			if ra := r.header.Get("Retry-After"); ra != "1" {
				t.Errorf("request %d: busy with Retry-After %q, want 1", i, ra)
			}
		default:
			t.Errorf("request %d: %d %.200s", i, r.status, r.body)
		}
	}
	t.Logf("%d bodies of %d bytes on one key under max_buffered %d MiB: %d replays, %d 409 in-flight, %d 503 busy, %d cut while sending; gateway peak RSS %d MiB before, %d MiB after (bound %d MiB)",
		floodBodies, floodBodySize, floodBudget>>20, replays, conflicts, busy, cut, before>>20, after>>20, (floodBudget+bufferedOverhead)>>20)
	if after >= floodBudget+bufferedOverhead {
		t.Errorf("peak RSS %d MiB, want under max_buffered %d MiB + %d MiB", after>>20, floodBudget>>20, bufferedOverhead>>20)
	}
	if n := up.count("/flood"); n != 2 { // the warm-up and the flood's key
		t.Errorf("upstream executions = %d, want 2 (the warm-up and the flood's key once)", n)
	}
	if v := metric(t, gw, "idemgate_busy_total", `route="flood"`); int(v) < busy || int(v) > busy+cut {
		t.Errorf("idemgate_busy_total = %v, want the %d busy answers plus at most the %d requests cut while sending", v, busy, cut)
	}
	if v := metric(t, gw, "idemgate_buffered_bytes"); v != 0 {
		t.Errorf("idemgate_buffered_bytes = %v once every request was answered, want 0", v)
	}
}
