package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store/redis"
)

// insideScripts are the commands the store's scripts run inside Redis.
// INFO commandstats counts them too, but they are not round trips.
var insideScripts = []string{"time", "get", "mget", "set", "setrange", "zadd", "zrem", "zremrangebyscore", "publish"}

// roundTrips reads INFO commandstats and returns the commands clients sent
// (every command except those run inside scripts and the test's own INFO
// and CONFIG RESETSTAT), by name.
func roundTrips(t *testing.T, admin *goredis.Client) map[string]int64 {
	t.Helper()
	sent := redistest.CommandStats(t, admin)
	for name := range sent {
		if name == "info" || name == "config|resetstat" || slices.Contains(insideScripts, name) {
			delete(sent, name)
		}
	}
	return sent
}

// TestRedisCommandsPerRequest proves with Redis's own counters how many
// commands each kind of guarded request costs: execute = 2 (claim,
// complete), replay = 1, conflict = 1 (outcome unknown, and in flight),
// unmatched passthrough = 0. Calls shorter than a third of the lease cost no
// renewal. The client side is checked too: every command is one EVALSHA
// (no PING, no EVAL, no SCRIPT LOAD, no extra reads).
func TestRedisCommandsPerRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := newBenchHandler(t, benchRules, &redis.Module{Addresses: []string{"redis://" + srv.Addr}})
	admin := srv.Client(t)
	sent := &redistest.CommandLog{}
	h.gate.Store.(*redis.Store).Client().AddHook(sent)
	ctx := context.Background()
	const n = 25

	c := newBenchConn("/v1/deals")
	failing := func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusInternalServerError)
		return nil
	}
	// A call held in flight while its duplicates arrive.
	entered, release := make(chan struct{}), make(chan struct{})
	gated := func(w http.ResponseWriter, r *http.Request) error {
		close(entered)
		<-release
		return benchNext(w, r)
	}
	// Records the replay and conflict cases use, made before counting.
	observed := newBenchConn("/v1/observed")
	for i := range n {
		if s := c.serve(t, h, "done-"+strconv.Itoa(i)); s != http.StatusCreated {
			t.Fatalf("priming: status %d", s)
		}
		if s := observed.serve(t, h, "done-"+strconv.Itoa(i)); s != http.StatusCreated {
			t.Fatalf("priming the observed route: status %d", s)
		}
	}
	if s := c.serveWith(t, h, "held", failing); s != http.StatusInternalServerError {
		t.Fatalf("priming a held record: status %d", s)
	}
	inflight := make(chan error, 1)
	go func() {
		s, err := newBenchConn("/v1/deals").do(h, "in-flight", gated)
		if err == nil && s != http.StatusCreated {
			err = fmt.Errorf("status %d", s)
		}
		inflight <- err
	}()
	<-entered

	steps := []struct {
		name    string
		request func(i int) int // returns the status
		want    int             // status
		perReq  int64           // commands per request
		// inner are the commands per request that Redis runs, those inside
		// the scripts included (INFO commandstats counts them all);
		// fractions are commands run by one request in several.
		inner map[string]float64
	}{
		{"execute", func(i int) int { return c.serve(t, h, "new-"+strconv.Itoa(i)) }, http.StatusCreated, 2,
			// claim: MGET (the record and its tombstone: tombstone_ttl
			// is 720h by default), TIME, SET (with the lifetime), ZADD
			// (in flight); complete: SET (GET, with the lifetime), ZREM
			// (in flight), SET (the tombstone). No PUBLISH: nobody waits.
			map[string]float64{"evalsha": 2, "mget": 1, "time": 1, "set": 3, "zadd": 1, "zrem": 1}},
		// A replay reads the record (and its tombstone, in the same
		// command) and counts the attempt in place: no clock.
		{"replay", func(i int) int { return c.serve(t, h, "done-"+strconv.Itoa(i)) }, http.StatusCreated, 1,
			map[string]float64{"evalsha": 1, "mget": 1, "setrange": 1}},
		{"conflict (outcome unknown)", func(int) int { return c.serve(t, h, "held") }, http.StatusConflict, 1,
			map[string]float64{"evalsha": 1, "mget": 1, "setrange": 1}},
		// A live claim's lease is judged by the Redis clock.
		{"conflict (in flight)", func(int) int { return c.serve(t, h, "in-flight") }, http.StatusConflict, 1,
			map[string]float64{"evalsha": 1, "mget": 1, "setrange": 1, "time": 1}},
		// A duplicate on a route in observe mode costs what its replay
		// would: the claim that finds the record, nothing after the
		// upstream answers it again.
		{"observed duplicate", func(i int) int { return observed.serve(t, h, "done-"+strconv.Itoa(i)) }, http.StatusCreated, 1,
			map[string]float64{"evalsha": 1, "mget": 1, "setrange": 1}},
		{"passthrough", func(int) int { return newBenchConn("/v1/notes").serve(t, h, "k") }, http.StatusCreated, 0,
			map[string]float64{}},
	}
	for _, st := range steps {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		sent.Take()
		for i := range n {
			if got := st.request(i); got != st.want {
				t.Fatalf("%s: status %d, want %d", st.name, got, st.want)
			}
		}
		all := redistest.CommandStats(t, admin)
		delete(all, "info")
		delete(all, "config|resetstat")
		per := map[string]float64{}
		for name, calls := range all {
			per[name] = float64(calls) / n
		}
		t.Logf("%s: commands per request, those inside scripts included: %v", st.name, per)
		for name, want := range st.inner {
			if got := per[name]; got != want {
				t.Errorf("%s: %s per request = %v, want %v", st.name, name, got, want)
			}
		}
		for name := range per {
			if _, ok := st.inner[name]; !ok {
				t.Errorf("%s: Redis ran %s (%v per request), which this path must not", st.name, name, per[name])
			}
		}
		trips := roundTrips(t, admin)
		var total int64
		for _, calls := range trips {
			total += calls
		}
		if total != st.perReq*n || trips["evalsha"] != st.perReq*n {
			t.Errorf("%s: Redis counted %v for %d requests, want %d EVALSHA per request and nothing else", st.name, trips, n, st.perReq)
		}
		cmds := sent.Take()
		if int64(len(cmds)) != st.perReq*n || slices.IndexFunc(cmds, func(c string) bool { return c != "evalsha" }) >= 0 {
			t.Errorf("%s: the client sent %d commands %v, want %d EVALSHA", st.name, len(cmds), cmds, st.perReq*n)
		}
	}
	close(release)
	if err := <-inflight; err != nil {
		t.Errorf("the held call: %v", err)
	}
}
