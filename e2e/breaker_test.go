package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// createRoute is a route named create on /create whose breaker opens
// after 2 failures in a row, for a minute.
const createRoute = `routes:
  - name: create
    match: { path: /create }
    key: ["{header.Idempotency-Key}"]
    retry: { max_executions: 10, breaker: { failures: 2, cool_down: 60s } }
`

// TestBreakerPerSite: two sites in one gateway, each with its own
// upstream and a route named create. Site A's upstream answers 503 until
// A's breaker opens; site B's new requests are still forwarded, on their
// own stores and on one shared store alike. A reload keeps A's breaker
// open and B's closed.
func TestBreakerPerSite(t *testing.T) {
	srv := redistest.Start(t)
	for _, tt := range []struct {
		name   string
		stores func(dir string) (a, b string) // the sites' store arguments
	}{
		{"own stores", func(dir string) (string, string) {
			return "embedded " + filepath.Join(dir, "store-a"), "embedded " + filepath.Join(dir, "store-b")
		}},
		{"one shared store", func(string) (string, string) {
			url := "redis://" + srv.Addr + "/0"
			return url, url
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			upA, upB := newOutage(t), newOutage(t)
			upB.up.Store(true)
			storeA, storeB := tt.stores(t.TempDir())
			portB := freePort(t)
			siteB := fmt.Sprintf(`
:%d {
	idempotency {
		rules routes-b.yaml
		store %s
	}
	reverse_proxy %s
}
`, portB, storeB, upB.addr())
			g := writeGateway(t, gatewayConfig{store: storeA, upstream: upA.addr(), rules: createRoute, sites: siteB})
			writeRulesB := func(rules string) {
				if err := os.WriteFile(filepath.Join(g.dir, "routes-b.yaml"), []byte(rules), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			writeRulesB(createRoute)
			g.start()
			t.Cleanup(g.stop)
			urlB := fmt.Sprintf("http://127.0.0.1:%d", portB)
			post := func(base, key string) response {
				return send(t, "POST", base+"/create", dealBody, "Idempotency-Key", key, "Content-Type", "application/json")
			}

			for i := range 2 {
				if r := post(g.url, fmt.Sprint("a-", i)); r.status != http.StatusServiceUnavailable || r.kind() == "breaker-open" {
					t.Fatalf("site A, failure %d: %d %s, want the upstream's 503", i, r.status, r.body)
				}
			}
			if r := post(g.url, "a-new"); !isProblem(t, r, http.StatusServiceUnavailable, "breaker-open", "") {
				t.Fatalf("site A after 2 failures: %d %s, want 503 breaker-open", r.status, r.body)
			}
			siteBForwards := func(when string) {
				t.Helper()
				const n = 5
				before := upB.calls.Load()
				forwarded, refused := 0, 0
				for i := range n {
					switch r := post(urlB, fmt.Sprint("b-", strings.ReplaceAll(when, " ", "-"), "-", i)); {
					case r.status == http.StatusCreated:
						forwarded++
					case isProblem(t, r, http.StatusServiceUnavailable, "breaker-open", ""):
						refused++
					default:
						t.Fatalf("site B %s, request %d: %d %s", when, i, r.status, r.body)
					}
				}
				t.Logf("site B %s: %d of %d forwarded, %d of %d refused with 503 breaker-open", when, forwarded, n, refused, n)
				if forwarded != n || upB.calls.Load()-before != n {
					t.Errorf("site B %s: %d of %d new requests forwarded (upstream B got %d), want all: site A's breaker is not B's",
						when, forwarded, n, upB.calls.Load()-before)
				}
			}
			siteBForwards("with A's breaker open")
			if v := metric(t, g, "idemgate_breaker_open", `route="create"`); v != 1 {
				t.Errorf(`idemgate_breaker_open{route="create"} = %v, want 1 (A's open, B's closed)`, v)
			}

			// A reload that changes site B's rules keeps both breakers as
			// they were: A's open, B's closed.
			writeRulesB(createRoute + `  - name: other
    match: { path: /other }
    key: ["{header.Idempotency-Key}"]
`)
			if out, err := g.reload(); err != nil {
				t.Fatalf("reload: %v\n%s", err, out)
			}
			callsA := upA.calls.Load()
			if r := post(g.url, "a-after-reload"); !isProblem(t, r, http.StatusServiceUnavailable, "breaker-open", "") {
				t.Errorf("site A after the reload: %d %s, want 503 breaker-open (the reload kept its breaker)", r.status, r.body)
			}
			if n := upA.calls.Load(); n != callsA {
				t.Errorf("upstream A got %d calls after the reload, want none", n-callsA)
			}
			siteBForwards("after the reload")
			if v := metric(t, g, "idemgate_breaker_open", `route="create"`); v != 1 {
				t.Errorf(`idemgate_breaker_open{route="create"} after the reload = %v, want 1`, v)
			}
		})
	}
}

// TestWaitersCheckBreaker: with on_in_flight: wait and on_unknown_outcome:
// release, a herd of duplicates waits for a first request that the
// upstream resets after reading. Every released outcome is a breaker
// failure; once the breaker is open (2 failures, cool-down a minute, so no
// probe in the test), a waiter that would go on to execute is refused with
// the breaker's 503 and nothing is forwarded: the key executes at most
// failures times.
func TestWaitersCheckBreaker(t *testing.T) {
	const (
		failures = 2
		herd     = 200
	)
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newFaultUpstream(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr, rules: fmt.Sprintf(`routes:
  - name: create
    match: { path: /held-reset/* }
    key: ["{header.Idempotency-Key}"]
    on_in_flight: wait
    in_flight_wait: 20s
    on_unknown_outcome: release
    retry: { max_executions: 1000, breaker: { failures: %d, cool_down: 60s } }
`, failures)})
		const key = "herd-1"
		url := gw.url + "/held-reset/" + key
		arrived, open := up.gates.hold(key)
		t.Cleanup(open)
		first := make(chan response, 1)
		go func() { first <- send(t, "POST", url, dealBody, "Idempotency-Key", key) }()
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the first request did not reach the upstream")
		}
		rs := make([]response, herd)
		done := make(chan struct{})
		go func() {
			together(herd, func(i int) { rs[i] = send(t, "POST", url, dealBody, "Idempotency-Key", key) })
			close(done)
		}()
		// The herd waits for the first; let it gather before the
		// upstream resets the first call. (How many gathered does not
		// change what is asserted: a late duplicate meets the open
		// breaker at the door.)
		time.Sleep(500 * time.Millisecond)
		open()
		<-done
		rs = append(rs, <-first)

		kinds := map[string]int{}
		for _, r := range rs {
			kind := fmt.Sprint(r.status)
			if k := r.kind(); k != "" {
				kind += " " + k
			}
			kinds[kind]++
		}
		var summary []string
		for k, n := range kinds {
			summary = append(summary, fmt.Sprintf("%s: %d", k, n))
		}
		slices.Sort(summary)
		executions := up.executions(key)
		t.Logf("%s: a herd of %d on one key: executions %d (breaker failures %d); answers %s",
			be.name, herd, executions, failures, strings.Join(summary, ", "))
		if executions > failures {
			t.Errorf("executions = %d, want at most %d: once the breaker opened, no waiter may go on to execute", executions, failures)
		}
		if kinds["503 breaker-open"] == 0 {
			t.Errorf("no waiter got 503 breaker-open")
		}
		if kinds["201"] > 0 {
			t.Errorf("%d answers were 201 from an upstream that resets every call", kinds["201"])
		}
	})
}
