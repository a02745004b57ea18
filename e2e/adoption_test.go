package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// observeRules is one route, deals, in mode (observe or enforce).
const observeRules = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    external_id: id
    mode: %s
`

// TestObserveThenEnforce: a route in observe mode forwards every
// duplicate (3 sends, 3 executions, none replayed) and counts what enforce
// would have done; a reload to enforce, without a restart, then replays
// the answer recorded while observing: no 422, no fourth execution.
func TestObserveThenEnforce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newUpstream(t)
		consolePort := freePort(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: fmt.Sprintf(observeRules, "observe"),
			sites: fmt.Sprintf(":%d {\n\tidempotency_console\n}", consolePort)})
		body := []byte(`{"title":"observed"}`)
		var first []byte
		for i := range 3 {
			r := send(t, "POST", gw.url+"/deals", body, "Idempotency-Key", "obs-1")
			if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("send %d: %d replayed=%q %s, want the upstream's own 201", i+1, r.status, r.header.Get("Idempotent-Replayed"), r.body)
			}
			if i == 0 {
				first = r.body
			}
		}
		if got := up.count("/deals"); got != 3 {
			t.Fatalf("executions = %d, want 3 (observe forwards every duplicate)", got)
		}
		if got := metric(t, gw, "idemgate_observed_total", `route="deals"`, `would="replay"`); got != 2 {
			t.Errorf(`idemgate_observed_total{route="deals",would="replay"} = %v, want 2`, got)
		}
		t.Logf("observe: 3 sends, %d executions, observed would=replay %v", up.count("/deals"),
			metric(t, gw, "idemgate_observed_total", `route="deals"`, `would="replay"`))

		// The console's routes table shows the mode and the counts.
		page := send(t, "GET", fmt.Sprintf("http://127.0.0.1:%d/", consolePort), nil)
		for _, want := range []string{`<span class="tag observe">observe</span>`, "replayed 2 · refused in flight 0"} {
			if !bytes.Contains(page.body, []byte(want)) {
				t.Errorf("the console does not show %q:\n%s", want, page.body)
			}
		}

		pid := gw.cmd.Process.Pid
		if err := os.WriteFile(filepath.Join(gw.dir, "routes.yaml"), fmt.Appendf(nil, observeRules, "enforce"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := gw.reload(); err != nil {
			t.Fatalf("reload: %v\n%s", err, out)
		}
		for i := range 2 {
			r := send(t, "POST", gw.url+"/deals", body, "Idempotency-Key", "obs-1")
			if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, first) {
				t.Errorf("after enforce, send %d: %d replayed=%q %s, want the first answer replayed", i+1, r.status, r.header.Get("Idempotent-Replayed"), r.body)
			}
		}
		if got := up.count("/deals"); got != 3 {
			t.Errorf("executions after enforce = %d, want still 3", got)
		}
		if gw.cmd.Process.Pid != pid {
			t.Error("the gateway restarted")
		}
	})
}

// waitRules: deals waits 5s for the first request, short waits 300ms,
// failing (/status/*) waits 5s.
const waitRules = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    on_in_flight: wait
    in_flight_wait: 5s
  - name: short
    match: { path: /short }
    key: ["{header.Idempotency-Key}"]
    on_in_flight: wait
    in_flight_wait: 300ms
  - name: failing
    match: { path: /status/* }
    key: ["{header.Idempotency-Key}"]
    on_in_flight: wait
    in_flight_wait: 5s
`

// startFirst sends the first request to path through gw while the
// upstream holds it, and returns once the upstream has it, with the
// channel its response arrives on and the function that lets the upstream
// answer.
func startFirst(t *testing.T, gw *gateway, up *upstream, path, key string) (<-chan response, func()) {
	t.Helper()
	arrived, open := up.gates.hold(path)
	first := make(chan response, 1)
	go func() { first <- send(t, "POST", gw.url+path, []byte(`{"title":"slow"}`), "Idempotency-Key", key) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach the upstream")
	}
	t.Cleanup(open)
	return first, open
}

// sendAll sends n duplicates of key to path, to the gateways in turn, at
// once, and returns their responses and when each arrived.
func sendAll(t *testing.T, gws []*gateway, path, key string, n int) ([]response, []time.Time) {
	rs, at := make([]response, n), make([]time.Time, n)
	together(n, func(i int) {
		rs[i] = send(t, "POST", gws[i%len(gws)].url+path, []byte(`{"title":"slow"}`), "Idempotency-Key", key)
		at[i] = time.Now()
	})
	return rs, at
}

// TestWaitForFirst: 10 duplicates that arrive while the first request
// runs for 1s wait for it and get its replay: 1 execution. A route whose
// wait is shorter than the call answers 409 once the wait is over; a
// waiter whose first request ends as outcome unknown gets the 409
// outcome-unknown problem.
func TestWaitForFirst(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		up := newUpstream(t)
		gw := startGateway(t, gatewayConfig{store: be.store(t), upstream: up.addr(), rules: waitRules})

		t.Run("replay", func(t *testing.T) {
			first, open := startFirst(t, gw, up, "/deals", "wait-1")
			time.AfterFunc(time.Second, open)
			rs, _ := sendAll(t, []*gateway{gw}, "/deals", "wait-1", 10)
			f := <-first
			if f.status != http.StatusCreated {
				t.Fatalf("first: %d %s", f.status, f.body)
			}
			for i, r := range rs {
				if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, f.body) {
					t.Errorf("waiter %d: %d replayed=%q %s, want the first's answer replayed", i, r.status, r.header.Get("Idempotent-Replayed"), r.body)
				}
			}
			if got := up.count("/deals"); got != 1 {
				t.Errorf("executions = %d, want 1", got)
			}
			if got := metric(t, gw, "idemgate_in_flight_waits_total", `route="deals"`, `result="replayed"`); got != 10 {
				t.Errorf(`idemgate_in_flight_waits_total{result="replayed"} = %v, want 10`, got)
			}
		})

		t.Run("short wait", func(t *testing.T) {
			_, open := startFirst(t, gw, up, "/short", "wait-2")
			defer open()
			began := time.Now()
			r := send(t, "POST", gw.url+"/short", []byte(`{"title":"slow"}`), "Idempotency-Key", "wait-2")
			took := time.Since(began)
			if !isProblem(t, r, http.StatusConflict, "in-flight", "") {
				t.Errorf("after the wait: %d %s, want 409 in-flight", r.status, r.body)
			}
			if took < 300*time.Millisecond {
				t.Errorf("answered after %s, before in_flight_wait (300ms) was over", took)
			}
			t.Logf("409 after %s of a 300ms wait", took.Round(time.Millisecond))
		})

		t.Run("first ends unknown", func(t *testing.T) {
			_, open := startFirst(t, gw, up, "/status/502", "wait-3")
			time.AfterFunc(300*time.Millisecond, open)
			r := send(t, "POST", gw.url+"/status/502", []byte(`{"title":"slow"}`), "Idempotency-Key", "wait-3")
			if !isProblem(t, r, http.StatusConflict, "outcome-unknown", "") {
				t.Errorf("waiter: %d %s, want 409 outcome-unknown", r.status, r.body)
			}
			if got := up.count("/status/502"); got != 1 {
				t.Errorf("executions = %d, want 1", got)
			}
		})
	})
}

// TestWaitAcrossGateways: two gateways share one Redis; the first request
// runs on the first gateway, 50 duplicates wait on both, and every one is
// woken by the first's completion notice and gets the replay. It prints
// how long after the upstream answered each waiter had its replay, and
// how many commands Redis ran per waiting request.
func TestWaitAcrossGateways(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	up := newUpstream(t)
	const n = 50
	var gws []*gateway
	for range 2 {
		gws = append(gws, startGateway(t, gatewayConfig{store: "redis://" + srv.Addr, upstream: up.addr(), rules: waitRules}))
	}
	// Requests on each gateway first, as many at once as will wait: the
	// secret, the scripts and the connection pools are in place.
	for _, gw := range gws {
		together(n, func(i int) {
			send(t, "POST", gw.url+"/status/200", []byte(`{}`), "Idempotency-Key", fmt.Sprint("warm-", i))
		})
	}
	first, open := startFirst(t, gws[0], up, "/deals", "fleet-wait")
	if err := admin.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	var opened time.Time
	time.AfterFunc(time.Second, func() { opened = time.Now(); open() })
	rs, at := sendAll(t, gws, "/deals", "fleet-wait", n)
	f := <-first
	stats := redistest.CommandStats(t, admin)
	delete(stats, "info")
	delete(stats, "config|resetstat")

	var after []time.Duration
	for i, r := range rs {
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, f.body) {
			t.Errorf("waiter %d (gateway %d): %d replayed=%q %s", i, i%2, r.status, r.header.Get("Idempotent-Replayed"), r.body)
		}
		after = append(after, at[i].Sub(opened))
	}
	if got := up.count("/deals"); got != 1 {
		t.Errorf("executions = %d, want 1", got)
	}
	for i, gw := range gws {
		if got := metric(t, gw, "idemgate_in_flight_waits_total", `route="deals"`, `result="replayed"`); got != n/2 {
			t.Errorf(`gateway %d: idemgate_in_flight_waits_total{result="replayed"} = %v, want %d`, i, got, n/2)
		}
	}
	slices.Sort(after)
	t.Logf("%d waiters on 2 gateways: replay after the upstream was let answer: median %s, p90 %s, max %s",
		n, after[n/2].Round(100*time.Microsecond), after[n*9/10].Round(100*time.Microsecond), after[n-1].Round(100*time.Microsecond))

	// Redis's own counters over the waiters, the first request's
	// completion and its notice. Commands run inside scripts are counted
	// too; those clients sent are the others, plus the waiters' GETs: every
	// EVALSHA but the first's completion is a claim, which runs one GET
	// (or one MGET, the record with its tombstone).
	inside := []string{"time", "get", "mget", "set", "setrange", "zadd", "zrem", "zremrangebyscore", "publish"}
	var sent, all int64
	for name, calls := range stats {
		all += calls
		if !slices.Contains(inside, name) {
			sent += calls
		}
	}
	sent += stats["get"] - (stats["evalsha"] - 1 - stats["mget"])
	t.Logf("Redis commands while %d requests waited: %v; sent by clients: %.2f per waiting request; with those run inside scripts: %.2f",
		n, stats, float64(sent)/n, float64(all)/n)
	if per := float64(sent) / n; per > 3 {
		t.Errorf("clients sent %.2f commands per waiting request, want at most 3", per)
	}
}
