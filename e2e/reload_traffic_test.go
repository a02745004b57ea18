package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/redis"
)

// Bounds of the reload-under-traffic tests.
const (
	rtWorkers      = 6
	rtMaxPerWorker = 3000 // iterations; the reloads normally end traffic long before
	rtPerReload    = 150  // requests answered between two reloads
	rtMaxFailures  = 20   // failures kept for the report
)

// rtUpstream is the business API behind the gateway: it counts executions
// per forwarded Idempotency-Key and can hold a key's call at a gate.
type rtUpstream struct {
	fake
	calls counter
	gates gates
}

func rtNewUpstream(t testing.TB) *rtUpstream {
	u := &rtUpstream{}
	u.fake = startFake(t, u.serve)
	return u
}

func (u *rtUpstream) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := forwardedKey(r)
	n, total := u.calls.add(key)
	if !u.gates.wait(key, nil, 20*time.Second) {
		// A few milliseconds of work, so that reloads find calls running.
		time.Sleep(time.Duration(total%8) * time.Millisecond)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"key":%q,"call":%d}`, key, n)
}

// gate holds the next call for key until open is called; arrived closes
// when that call has reached the upstream.
func (u *rtUpstream) gate(key string) (arrived <-chan struct{}, open func()) {
	return u.gates.hold(key)
}

func (u *rtUpstream) executions(key string) int { return u.calls.count(key) }

// rtAnswer is what a client saw for one delivery.
type rtAnswer struct {
	status   int
	replayed bool
	kind     string // problem type fragment, for problems
	key      string // from the upstream's body
	call     int    // the upstream's per-key call number
	err      error
	body     string
}

var rtClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// rtBody is the one payload of a key: every delivery of a key is identical.
func rtBody(key string) []byte {
	return []byte(fmt.Sprintf(`{"item":%q,"qty":1,"trace":"t-%s"}`, key, key))
}

// rtDeliver sends one delivery of key to path.
func rtDeliver(url, path, key string) rtAnswer {
	r, err := do(rtClient, http.MethodPost, url+path, rtBody(key), "Idempotency-Key", key, "Content-Type", "application/json")
	if r.status == 0 {
		return rtAnswer{err: err}
	}
	a := rtAnswer{status: r.status, replayed: r.header.Get("Idempotent-Replayed") == "true", err: err, body: string(r.body)}
	switch {
	case r.header.Get("Content-Type") == "application/problem+json":
		a.kind = r.kind()
	case r.status == http.StatusCreated:
		var v struct {
			Key  string
			Call int
		}
		_ = json.Unmarshal(r.body, &v)
		a.key, a.call = v.Key, v.Call
	}
	return a
}

// rtKey is one logical operation of the traffic.
type rtKey struct {
	name    string
	created time.Time // before its first delivery left

	mu       sync.Mutex
	answered time.Time // when the first 201 came back
}

func (k *rtKey) markAnswered(at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.answered.IsZero() {
		k.answered = at
	}
}

func (k *rtKey) firstAnswer() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.answered
}

// rtTraffic is background traffic of new keys and duplicates on /orders.
type rtTraffic struct {
	url  string
	stop chan struct{}
	wg   sync.WaitGroup

	requests, executed, replays, inFlight, active atomic.Int64
	resent                                        atomic.Int64 // deliveries sent again after a broken connection

	mu       sync.Mutex
	keys     []*rtKey
	failures []string
	failed   int
}

func (tr *rtTraffic) fail(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.failed++
	if len(tr.failures) < rtMaxFailures {
		tr.failures = append(tr.failures, fmt.Sprintf(format, args...))
	}
}

func (tr *rtTraffic) newKey(worker, i int) *rtKey {
	k := &rtKey{name: fmt.Sprintf("rt-w%d-%d", worker, i), created: time.Now()}
	tr.mu.Lock()
	tr.keys = append(tr.keys, k)
	tr.mu.Unlock()
	return k
}

func (tr *rtTraffic) oldKey(r *rand.Rand) *rtKey { return pick(&tr.mu, &tr.keys, r) }

// deliver sends key once and checks the answer: 201 from the key's one
// execution (first or replayed), or 409 while that execution runs. A
// delivery whose connection broke before any answer (a connection the
// old config's server closed as the reload replaced it) is sent again at
// once with its key, as a client of the gateway does; a second break is a
// failure.
func (tr *rtTraffic) deliver(k *rtKey) {
	tr.active.Add(1)
	a := rtDeliver(tr.url, "/orders", k.name)
	if a.err != nil && a.status == 0 {
		tr.resent.Add(1)
		a = rtDeliver(tr.url, "/orders", k.name)
	}
	tr.active.Add(-1)
	tr.requests.Add(1)
	switch {
	case a.err != nil:
		tr.fail("%s: %v", k.name, a.err)
	case a.status == http.StatusCreated && a.key == k.name && a.call == 1:
		k.markAnswered(time.Now())
		if a.replayed {
			tr.replays.Add(1)
		} else {
			tr.executed.Add(1)
		}
	case a.status == http.StatusCreated:
		tr.fail("%s: 201 from upstream call %d of key %q (replayed %t)", k.name, a.call, a.key, a.replayed)
	case a.status == http.StatusConflict && a.kind == "in-flight":
		tr.inFlight.Add(1)
	default:
		tr.fail("%s: %d %s", k.name, a.status, a.body)
	}
}

func (tr *rtTraffic) worker(w int) {
	defer tr.wg.Done()
	r := rand.New(rand.NewPCG(uint64(w), 4))
	for i := range rtMaxPerWorker {
		select {
		case <-tr.stop:
			return
		default:
		}
		switch old := tr.oldKey(r); {
		case old != nil && r.IntN(2) == 0:
			// A retry of any worker's key, maybe while it still runs.
			tr.deliver(old)
		case r.IntN(3) == 0:
			// A double delivery: the same new key twice at once.
			k := tr.newKey(w, i)
			var both sync.WaitGroup
			both.Add(2)
			for range 2 {
				go func() { defer both.Done(); tr.deliver(k) }()
			}
			both.Wait()
		default:
			tr.deliver(tr.newKey(w, i))
		}
	}
}

func (tr *rtTraffic) start() {
	for w := range rtWorkers {
		tr.wg.Add(1)
		go tr.worker(w)
	}
}

// waitRequests waits until n more deliveries were answered.
func (tr *rtTraffic) waitRequests(t *testing.T, n int64) {
	t.Helper()
	want := tr.requests.Load() + n
	for deadline := time.Now().Add(15 * time.Second); tr.requests.Load() < want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("traffic stalled: %d deliveries answered, waiting for %d", tr.requests.Load(), want)
		}
	}
}

// rtRules is routes.yaml at one version; orders is the route under traffic.
func rtRules(version int, ttl, extra string) string {
	return fmt.Sprintf(`defaults:
  lock_lease: 10s
routes:
  - name: orders
    match: { path: /orders }
    key: ["{header.Idempotency-Key}"]
    ttl: %s
%s  - name: marker-v%d
    match: { path: /marker-v%d }
    key: ["{header.Idempotency-Key}"]
`, ttl, extra, version, version)
}

// rtConfig is the gateway's running config, as its admin API shows it.
func rtConfig(t *testing.T, gw *gateway) string {
	t.Helper()
	_, b, _ := adminCall(t, gw, http.MethodGet, "/config/", "")
	return string(b)
}

// rtHold delivers key on a gated upstream call and returns once the call
// has reached the upstream; finish opens the gate and returns the answer.
func rtHold(t *testing.T, up *rtUpstream, url, key string) (finish func() rtAnswer) {
	t.Helper()
	arrived, open := up.gate(key)
	t.Cleanup(open)
	done := make(chan rtAnswer, 1)
	go func() { done <- rtDeliver(url, "/orders", key) }()
	select {
	case <-arrived:
	case a := <-done:
		t.Fatalf("held delivery of %s answered before reaching the upstream: %d %s %v", key, a.status, a.body, a.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("held delivery of %s never reached the upstream", key)
	}
	return func() rtAnswer {
		open()
		select {
		case a := <-done:
			return a
		case <-time.After(20 * time.Second):
			t.Fatalf("held delivery of %s did not finish after its gate opened", key)
			return rtAnswer{}
		}
	}
}

// rtCheckHeld checks a held delivery's answer and its record.
func rtCheckHeld(t *testing.T, st *redis.Store, key string, a rtAnswer) *store.Record {
	t.Helper()
	if a.err != nil || a.status != http.StatusCreated || a.replayed || a.call != 1 {
		t.Errorf("delivery held across a reload: %d replayed=%t call=%d %s %v, want 201 from call 1", a.status, a.replayed, a.call, a.body, a.err)
	}
	rec, err := st.Get(context.Background(), recordID("orders", "", key))
	if err != nil || rec == nil {
		t.Fatalf("record of %s (held across a reload): %v %v", key, rec, err)
	}
	if rec.State != store.StateCompleted || rec.Executions != 1 {
		t.Errorf("record of %s held across a reload: state %s, executions %d; want completed, 1", key, rec.State, rec.Executions)
	}
	return rec
}

// rtReload is one edit followed by `idemgate reload`.
type rtReload struct {
	name      string
	rules     string              // routes.yaml contents
	caddyfile func(string) string // edit of the current Caddyfile; nil keeps it
	valid     bool
	want      []string // in the reload's output when invalid; in the running config when valid
}

// TestReloadUnderTraffic runs background traffic of new keys and
// duplicates against one gateway on a real redis-server while ten reloads
// run: valid and invalid edits alternating, one valid edit changing the
// route's ttl, one changing the store options (a new shared connection),
// invalid ones failing while adapting and inside the server. No request
// may fail (409 "in flight" is an expected answer), no key may execute
// twice, a record keeps the ttl of the config that created it, and calls
// held at the upstream across a reload complete their records.
func TestReloadUnderTraffic(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	st := redis.New(rdb, "", 2*time.Second)
	up := rtNewUpstream(t)
	gw := startGateway(t, gatewayConfig{
		store:    "redis://" + srv.Addr,
		upstream: up.addr(),
		rules:    rtRules(0, "1h", ""),
		extra:    withSecret("op_timeout 2s"),
	})
	t.Cleanup(rtClient.CloseIdleConnections)
	rulesPath := filepath.Join(gw.dir, "routes.yaml")
	base, err := os.ReadFile(gw.caddyfile)
	if err != nil {
		t.Fatal(err)
	}
	caddyfile := string(base)

	// A port some other program holds: a site on it fails the new
	// config inside the server, after its handlers were provisioned.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	refused := freePort(t) // nothing listens here

	refunds := `  - name: refunds
    match: { path: /refunds }
    key: ["{header.Idempotency-Key}"]
`
	fpIgnore := `    fingerprint: { ignore: [trace] }
    lock_lease: 20s
`
	reloads := []rtReload{
		{name: "add a route", rules: rtRules(1, "1h", refunds), valid: true, want: []string{`"marker-v1"`, `"refunds"`}},
		{name: "invalid enum", rules: strings.Replace(rtRules(1, "1h", refunds), "  - name: refunds\n", "  - name: refunds\n    on_unknown_outcome: maybe\n", 1),
			want: []string{"routes.yaml:9: routes[1].on_unknown_outcome", "is not one of hold, release, store"}},
		{name: "ttl 1h to 3h", rules: rtRules(2, "3h", refunds), valid: true, want: []string{`"marker-v2"`, `"ttl":"3h0m0s"`}},
		{name: "YAML syntax error", rules: rtRules(2, "3h", refunds) + "  - name: [broken\n", want: []string{"routes.yaml:"}},
		{name: "fingerprint rule and lease", rules: rtRules(3, "3h", fpIgnore+refunds), valid: true, want: []string{`"marker-v3"`, `"ignore":["trace"]`}},
		{name: "site on a busy port", rules: rtRules(3, "3h", fpIgnore+refunds), want: []string{"address already in use"},
			caddyfile: func(c string) string {
				return c + fmt.Sprintf("\nhttp://%s {\n\trespond \"busy\"\n}\n", busy.Addr())
			}},
		{name: "store options: new connection", rules: rtRules(4, "3h", fpIgnore+refunds), valid: true, want: []string{`"marker-v4"`, `"op_timeout":3000000000`},
			caddyfile: func(c string) string { return strings.Replace(c, "op_timeout 2s", "op_timeout 3s", 1) }},
		{name: "unknown field", rules: strings.Replace(rtRules(4, "3h", fpIgnore+refunds), "ttl: 3h", "tll: 3h", 1), want: []string{"routes.yaml:", "tll"}},
		{name: "remove a route", rules: rtRules(5, "3h", fpIgnore), valid: true, want: []string{`"marker-v5"`}},
		{name: "unreachable store", rules: rtRules(5, "3h", fpIgnore), want: []string{"idempotency store"},
			caddyfile: func(c string) string {
				return strings.Replace(c, "store redis://"+srv.Addr, fmt.Sprintf("store redis://127.0.0.1:%d", refused), 1)
			}},
	}

	tr := &rtTraffic{url: gw.url, stop: make(chan struct{})}
	tr.start()
	stopped := false
	stopTraffic := func() {
		if !stopped {
			stopped = true
			close(tr.stop)
			tr.wg.Wait()
		}
	}
	defer stopTraffic()

	var (
		ttlStart, ttlEnd time.Time
		inFlightAtReload []int64
		valid, invalid   int
	)
	for i, rl := range reloads {
		tr.waitRequests(t, rtPerReload)
		if err := os.WriteFile(rulesPath, []byte(rl.rules), 0o644); err != nil {
			t.Fatal(err)
		}
		next := caddyfile
		if rl.caddyfile != nil {
			next = rl.caddyfile(caddyfile)
		}
		if err := os.WriteFile(gw.caddyfile, []byte(next), 0o644); err != nil {
			t.Fatal(err)
		}

		// Calls held at the upstream across the ttl change and across the
		// change of store connection.
		var finish func() rtAnswer
		held := fmt.Sprintf("rt-held-%d", i+1)
		if rl.name == "ttl 1h to 3h" || rl.name == "store options: new connection" {
			finish = rtHold(t, up, gw.url, held)
		}

		inFlightAtReload = append(inFlightAtReload, tr.active.Load())
		began := time.Now()
		out, err := gw.reload()
		ended := time.Now()
		switch {
		case rl.valid && err != nil:
			t.Fatalf("reload %d (%s): %v\n%s", i+1, rl.name, err, out)
		case rl.valid:
			valid++
			caddyfile = next
			running := rtConfig(t, gw)
			for _, want := range rl.want {
				if !strings.Contains(running, want) {
					t.Errorf("reload %d (%s): running config lacks %s", i+1, rl.name, want)
				}
			}
		case err == nil:
			t.Fatalf("reload %d (%s) succeeded:\n%s", i+1, rl.name, out)
		default:
			invalid++
			for _, want := range rl.want {
				if !strings.Contains(out, want) {
					t.Errorf("reload %d (%s): the error does not say %q:\n%s", i+1, rl.name, want, out)
				}
			}
		}
		if rl.name == "ttl 1h to 3h" {
			ttlStart, ttlEnd = began, ended
		}
		if finish != nil {
			// The held call belongs to the config before the reload: it
			// completes there, with that config's ttl and connection.
			rec := rtCheckHeld(t, st, held, finish())
			pttl := rdb.PTTL(context.Background(), st.Key(rec.ID)).Val()
			lo, hi := 2*time.Hour, 3*time.Hour
			if rl.name == "ttl 1h to 3h" {
				lo, hi = 0, time.Hour
			}
			if pttl <= lo || pttl > hi {
				t.Errorf("record of %s, created before reload %d (%s) and completed after it: PTTL %v, want in (%v, %v]", held, i+1, rl.name, pttl, lo, hi)
			}
		}
	}
	// The last reload failed: the previous config keeps serving.
	if running := rtConfig(t, gw); !strings.Contains(running, `"marker-v5"`) || strings.Contains(running, fmt.Sprintf("127.0.0.1:%d", refused)) {
		t.Errorf("after a failed reload the running config is not the last valid one:\n%s", running)
	}
	tr.waitRequests(t, rtPerReload)
	stopTraffic()

	tr.mu.Lock()
	keys := slices.Clone(tr.keys)
	failed, failures := tr.failed, slices.Clone(tr.failures)
	tr.mu.Unlock()
	if failed > 0 {
		t.Errorf("%d failed deliveries, e.g.:\n%s", failed, strings.Join(failures, "\n"))
	}

	// Every key executed exactly once and left a completed record whose
	// lifetime is the ttl of the config that created it.
	var duplicates, unanswered, oldTTL, newTTL, eitherTTL int
	ctx := context.Background()
	for _, k := range keys {
		if n := up.executions(k.name); n != 1 {
			duplicates += max(n-1, 0)
			t.Errorf("key %s executed %d times, want 1", k.name, n)
		}
		answered := k.firstAnswer()
		if answered.IsZero() {
			unanswered++
			continue
		}
		id := recordID("orders", "", k.name)
		rec, err := st.Get(ctx, id)
		if err != nil || rec == nil {
			t.Errorf("record of %s: %v %v", k.name, rec, err)
			continue
		}
		if rec.State != store.StateCompleted || rec.Executions != 1 {
			t.Errorf("record of %s: state %s, executions %d; want completed, 1", k.name, rec.State, rec.Executions)
		}
		pttl := rdb.PTTL(ctx, st.Key(id)).Val()
		switch {
		case answered.Before(ttlStart):
			oldTTL++
			if pttl <= 0 || pttl > time.Hour {
				t.Errorf("record of %s, completed before the ttl change: PTTL %v, want at most 1h", k.name, pttl)
			}
		case k.created.After(ttlEnd):
			newTTL++
			if pttl <= 2*time.Hour || pttl > 3*time.Hour {
				t.Errorf("record of %s, created after the ttl change: PTTL %v, want between 2h and 3h", k.name, pttl)
			}
		default:
			eitherTTL++
			if pttl <= 0 || (pttl > time.Hour && pttl <= 2*time.Hour) || pttl > 3*time.Hour {
				t.Errorf("record of %s, created during the ttl change: PTTL %v, want at most 1h or between 2h and 3h", k.name, pttl)
			}
		}
	}
	if unanswered > 0 {
		t.Errorf("%d keys never got a 201", unanswered)
	}
	if oldTTL == 0 || newTTL == 0 {
		t.Errorf("ttl checks: %d records from before the change, %d from after; want some of each", oldTTL, newTTL)
	}
	if slices.Max(inFlightAtReload) == 0 {
		t.Errorf("no delivery was in flight when a reload began (held calls aside): %v", inFlightAtReload)
	}
	t.Logf("deliveries %d (executed %d, replayed %d, 409 in flight %d, sent again after a broken connection %d), keys %d; reloads %d valid, %d invalid; deliveries in flight at each reload %v; failures %d; duplicate executions %d; ttl checks %d old, %d new, %d either",
		tr.requests.Load(), tr.executed.Load(), tr.replays.Load(), tr.inFlight.Load(), tr.resent.Load(), len(keys), valid, invalid, inFlightAtReload, failed, duplicates, oldTTL, newTTL, eitherTTL)
}

// rtGatewayClients lists the Redis client ids of every connection except
// the observer's own.
func rtGatewayClients(t *testing.T, observer *goredis.Client) map[string]bool {
	t.Helper()
	list, err := observer.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if strings.Contains(line, " name=rt-observer ") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(field, "id="); ok {
				ids[id] = true
			}
		}
	}
	return ids
}

func rtCountIn(ids, in map[string]bool) int {
	n := 0
	for id := range ids {
		if in[id] {
			n++
		}
	}
	return n
}

// TestReloadUnderTrafficNewStore changes the store options by a reload (a
// new key_prefix, so a new shared connection) while a call made under the
// old config is held at the upstream. The old connection must stay open
// until that call has recorded its outcome, and close after.
func TestReloadUnderTrafficNewStore(t *testing.T) {
	srv := redistest.Start(t)
	observer := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ClientName: "rt-observer", PoolSize: 1})
	t.Cleanup(func() { _ = observer.Close() })
	oldStore := redis.New(observer, "rta:", 2*time.Second)
	newStore := redis.New(observer, "rtb:", 2*time.Second)
	up := rtNewUpstream(t)
	gw := startGateway(t, gatewayConfig{
		store:    "redis://" + srv.Addr,
		upstream: up.addr(),
		rules:    rtRules(0, "1h", ""),
		extra:    withSecret("key_prefix rta:"),
	})
	t.Cleanup(rtClient.CloseIdleConnections)

	if a := rtDeliver(gw.url, "/orders", "rt-before"); a.status != http.StatusCreated {
		t.Fatalf("first delivery: %d %s %v", a.status, a.body, a.err)
	}
	oldConns := rtGatewayClients(t, observer)
	if len(oldConns) == 0 {
		t.Fatal("the gateway holds no Redis connection")
	}

	// A rules-only reload keeps the shared connection.
	if err := os.WriteFile(filepath.Join(gw.dir, "routes.yaml"), []byte(rtRules(1, "1h", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := gw.reload(); err != nil {
		t.Fatalf("rules reload: %v\n%s", err, out)
	}
	if a := rtDeliver(gw.url, "/orders", "rt-before"); a.status != http.StatusCreated || !a.replayed {
		t.Errorf("retry after a rules reload: %d replayed=%t %s", a.status, a.replayed, a.body)
	}
	if now := rtGatewayClients(t, observer); rtCountIn(oldConns, now) != len(oldConns) {
		t.Errorf("a rules-only reload reconnected to Redis: connections %v before, %v after", oldConns, now)
	}

	finish := rtHold(t, up, gw.url, "rt-held")
	caddyfile, err := os.ReadFile(gw.caddyfile)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(caddyfile), "key_prefix rta:", "key_prefix rtb:", 1)
	if err := os.WriteFile(gw.caddyfile, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := gw.reload(); err != nil {
		t.Fatalf("store reload: %v\n%s", err, out)
	}

	// The new config uses the new prefix.
	if a := rtDeliver(gw.url, "/orders", "rt-after"); a.status != http.StatusCreated || a.replayed {
		t.Errorf("first delivery after the store reload: %d replayed=%t %s", a.status, a.replayed, a.body)
	}
	ctx := context.Background()
	if rec, err := newStore.Get(ctx, recordID("orders", "", "rt-after")); err != nil || rec == nil || rec.State != store.StateCompleted {
		t.Errorf("record under the new prefix: %+v %v", rec, err)
	}
	if rec, err := oldStore.Get(ctx, recordID("orders", "", "rt-after")); err != nil || rec != nil {
		t.Errorf("record under the old prefix: %+v %v, want none", rec, err)
	}

	// The old config was cleaned up, but its call is still running: its
	// connection must still be open.
	if n := rtCountIn(oldConns, rtGatewayClients(t, observer)); n == 0 {
		t.Errorf("the old config's Redis connection closed while a call made under it was still running")
	}
	rtCheckHeld(t, oldStore, "rt-held", finish())

	// Once that call is done, nothing holds the old connection.
	waitFor(t, func() bool { return rtCountIn(oldConns, rtGatewayClients(t, observer)) == 0 })
	if a := rtDeliver(gw.url, "/orders", "rt-after"); a.status != http.StatusCreated || !a.replayed {
		t.Errorf("retry on the new connection: %d replayed=%t %s", a.status, a.replayed, a.body)
	}
	if n := up.executions("rt-held"); n != 1 {
		t.Errorf("held key executed %d times, want 1", n)
	}
}
