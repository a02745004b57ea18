package e2e

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The documented bounds of waiting duplicates (docs/capacity.md).
const (
	waitersPerKey     = 32
	waitersPerProcess = 256
)

// slowWaitRoute waits up to 30s for the first request on /slow/*.
const slowWaitRoute = `routes:
  - name: slow
    match: { path: /slow/* }
    key: ["{header.Idempotency-Key}"]
    on_in_flight: wait
    in_flight_wait: 30s
`

// TestWaitersBounded: duplicates wait for a first request the upstream
// holds. Past waitersPerKey waiters on one key, or waitersPerProcess in
// the gateway, a duplicate gets the 409 in-flight at once, while the
// first is still held; the idemgate_waiters gauge shows the bound held,
// and idemgate_waits_refused_total why the others were refused. When the
// first requests answer, every waiter gets its replay.
func TestWaitersBounded(t *testing.T) {
	for _, tt := range []struct {
		name        string
		keys, dupes int // dupes duplicates of each of keys keys
		reason      string
		waiting     int // want waiting at once
	}{
		{"per key", 1, 100, "per_key", waitersPerKey},
		{"per process", 10, 30, "per_process", waitersPerProcess},
	} {
		t.Run(tt.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, be backend) {
				up := newFaultUpstream(t)
				gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr, rules: slowWaitRoute})
				url := func(k int) (string, string) {
					key := fmt.Sprint("bound-", k)
					return gw.url + "/slow/" + key, key
				}
				var opens []func()
				firsts := make(chan response, tt.keys)
				for k := range tt.keys {
					u, key := url(k)
					arrived, open := up.gates.hold(key)
					opens = append(opens, open)
					t.Cleanup(open)
					go func() { firsts <- send(t, "POST", u, dealBody, "Idempotency-Key", key) }()
					select {
					case <-arrived:
					case <-time.After(10 * time.Second):
						t.Fatalf("the first request of %s did not reach the upstream", key)
					}
				}

				n := tt.keys * tt.dupes
				rs := make([]response, n)
				var answered atomic.Int64
				done := make(chan struct{})
				go func() {
					together(n, func(i int) {
						u, key := url(i % tt.keys)
						rs[i] = send(t, "POST", u, dealBody, "Idempotency-Key", key)
						answered.Add(1)
					})
					close(done)
				}()
				// Every duplicate has arrived once those answered and those
				// waiting make the herd. The upstream holds the first
				// requests for up to 10s: look well before that.
				want := n - tt.waiting
				var waiting float64
				for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					waiting = metric(t, gw, "idemgate_waiters", `route="slow"`)
					if int(answered.Load())+int(waiting) >= n {
						break
					}
				}
				refused := metric(t, gw, "idemgate_waits_refused_total", `route="slow"`, `reason="`+tt.reason+`"`)
				got := answered.Load()
				if len(firsts) > 0 {
					t.Fatal("a first request answered while the upstream should hold it")
				}
				t.Logf("%s: %d duplicates on %d keys: %d answered while the first requests were held, %v waiting (idemgate_waiters), %v refused (%s)",
					be.name, n, tt.keys, got, waiting, refused, tt.reason)
				if got != int64(want) || int(waiting) != tt.waiting || int(refused) != want {
					t.Errorf("answered while the first requests were held %d, waiting %v, refused %v; want %d, %d, %d", got, waiting, refused, want, tt.waiting, want)
				}
				for _, open := range opens {
					open()
				}
				<-done
				for range tt.keys {
					if f := <-firsts; f.status != http.StatusCreated {
						t.Fatalf("a first request: %d %s", f.status, f.body)
					}
				}
				conflicts, replays := 0, 0
				for i, r := range rs {
					switch {
					case isProblem(t, r, http.StatusConflict, "in-flight", ""):
						conflicts++
					case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true":
						replays++
					default:
						t.Errorf("duplicate %d: %d %s", i, r.status, r.body)
					}
				}
				if conflicts != want || replays != tt.waiting {
					t.Errorf("409 in-flight %d, replays %d; want %d and %d", conflicts, replays, want, tt.waiting)
				}
				if total := up.totalExecutions(); total != tt.keys {
					t.Errorf("executions = %d, want %d", total, tt.keys)
				}
				if v := metric(t, gw, "idemgate_waiters", `route="slow"`); v != 0 {
					t.Errorf("idemgate_waiters = %v once every wait ended, want 0", v)
				}
			})
		})
	}
}
