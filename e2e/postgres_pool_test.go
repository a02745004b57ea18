package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pgtest"
)

// TestPostgresSmallPoolSlowUpstream: 64 requests at once, each with a
// key of its own, to a slow upstream through a gateway on Postgres with
// pool_size 4. A call waits for a free connection within its op_timeout
// (docs/postgres.md, "pool_size"): the claims queue for the pool's four
// connections, and when more arrive than the pool answers within
// op_timeout, the last in the queue get 503 store-unavailable, with
// Retry-After, having executed nothing, and the log says that no
// connection came free in time. Every key then executes once when
// retried, and nothing executes twice. With a quick database the queue
// is short and all 64 are usually answered 201 (a loaded machine whose
// commits wait for its disk may not: that was the blip); with each
// statement reaching Postgres 150ms late the sixteenth claim of a
// connection's queue comes ~2.4s after it was made, past op_timeout, so
// the bound is met every time. A request whose claim waited with a
// connection, its statement sent, may have claimed the key as its wait
// ran out: its retry is answered 409 until the lease runs out, as after
// any store timeout.
func TestPostgresSmallPoolSlowUpstream(t *testing.T) {
	t.Run("quick database", func(t *testing.T) { smallPoolSlowUpstream(t, 0) })
	t.Run("slow database", func(t *testing.T) {
		if busy := smallPoolSlowUpstream(t, 150*time.Millisecond); busy == 0 {
			t.Fatal("no claim waited past op_timeout for a connection: the burst did not meet the pool's bound")
		}
	})
}

// smallPoolSlowUpstream runs the test on a database whose statements
// arrive latency late; it returns how many requests were turned away
// for want of a connection.
func smallPoolSlowUpstream(t *testing.T, latency time.Duration) (busy int) {
	const n, slow = 64, 1500 * time.Millisecond
	var calls atomic.Int64
	var per counter
	var burst atomic.Bool // the upstream is slow while the burst runs
	burst.Store(true)
	up := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		per.add(r.URL.Path)
		if burst.Load() {
			time.Sleep(slow)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"ok":true}`)
	})
	db := pgtest.Shared(t).CreateDatabase(t)
	if latency > 0 {
		db = delayed(t, db, latency)
	}
	gw := startGateway(t, gatewayConfig{store: db, upstream: up.addr(), rules: embeddedRules,
		extra: "pool_size 4"})
	key := func(i int) string { return fmt.Sprintf("pool-%d", i) }
	post := func(i int) response {
		r, err := do(client, "POST", fmt.Sprintf("%s/keys/%d", gw.url, i), []byte(`{}`), "Idempotency-Key", key(i))
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		return r
	}
	first := make([]response, n)
	began := time.Now()
	together(n, func(i int) { first[i] = post(i) })
	took := time.Since(began)
	burst.Store(false)
	counts := map[int]int{}
	for i, r := range first {
		counts[r.status]++
		switch r.status {
		case http.StatusCreated:
		case http.StatusServiceUnavailable:
			if !isProblem(t, r, http.StatusServiceUnavailable, "store-unavailable", "") || r.header.Get("Retry-After") == "" {
				t.Fatalf("request %d: 503 without the store-unavailable problem and Retry-After: %v %s", i, r.header, r.body)
			}
		default:
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	t.Logf("latency %v: %v in %v", latency, counts, took.Round(time.Millisecond))
	if c := int(calls.Load()); c != counts[http.StatusCreated] {
		t.Fatalf("the upstream ran %d times for %d answers 201: a request turned away was forwarded", c, counts[http.StatusCreated])
	}
	// The decisions that turned a request away for want of a connection
	// say so; the others timed out with a connection, their statement
	// sent (their claim may have committed).
	for _, l := range strings.Split(gw.logs.String(), "\n") {
		if strings.Contains(l, `"outcome":"store_error"`) &&
			strings.Contains(l, "no connection of the pool (pool_size 4) came free within op_timeout 2s") {
			busy++
		}
	}
	t.Logf("%d of %d turned away for want of a free connection", busy, counts[http.StatusServiceUnavailable])
	// The clients retry, two at a time: a 201 replays; a request turned
	// away executes now, or is still in flight (409) when its claim
	// committed as its wait ran out.
	retried := make([]response, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	together(2, func(int) {
		for i := range next {
			// Until the burst's completions are written (those that
			// waited past op_timeout too are retried in the background),
			// a retry may itself wait too long: a client tries again.
			for range 20 {
				if retried[i] = post(i); retried[i].status != http.StatusServiceUnavailable {
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
		}
	})
	executed := 0
	for i, r := range first {
		again := retried[i]
		switch {
		case r.status == http.StatusCreated && (again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true"):
			t.Fatalf("retry of %d: %d replayed=%q, want the 201 replayed", i, again.status, again.header.Get("Idempotent-Replayed"))
		case r.status == http.StatusCreated:
		case again.status == http.StatusCreated && again.header.Get("Idempotent-Replayed") == "":
			executed++
		case again.status != http.StatusConflict:
			t.Fatalf("retry of %d after a 503: %d replayed=%q, want it executed now or in flight", i, again.status, again.header.Get("Idempotent-Replayed"))
		}
	}
	t.Logf("retries after a 503: %d executed, %d still in flight", executed, counts[http.StatusServiceUnavailable]-executed)
	for i := range n {
		if c := per.count(fmt.Sprintf("/keys/%d", i)); c > 1 {
			t.Fatalf("key %d executed %d times", i, c)
		}
	}
	if c := int(calls.Load()); c != counts[http.StatusCreated]+executed {
		t.Fatalf("the upstream ran %d times; want %d", c, counts[http.StatusCreated]+executed)
	}
	return busy
}

// delayed returns dbURL with its host replaced by a proxy on 127.0.0.1
// that hands everything the gateway sends to Postgres on latency later,
// in order (the answers come back at once): every round trip takes
// latency longer.
func delayed(t *testing.T, dbURL string, latency time.Duration) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			type chunk struct {
				at time.Time
				b  []byte
			}
			q := make(chan chunk, 1024)
			wg.Go(func() { // gateway → Postgres, latency late
				defer close(q)
				for {
					b := make([]byte, 32<<10)
					k, err := in.Read(b)
					if k > 0 {
						q <- chunk{time.Now().Add(latency), b[:k]}
					}
					if err != nil {
						return
					}
				}
			})
			wg.Go(func() {
				defer out.Close()
				for c := range q {
					time.Sleep(time.Until(c.at))
					if _, err := out.Write(c.b); err != nil {
						return
					}
				}
			})
			wg.Go(func() { // Postgres → gateway, at once
				_, _ = io.Copy(in, out)
				in.Close()
			})
		}
	})
	u.Host = ln.Addr().String()
	return u.String()
}
