package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
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

// The topology tests run the real binary on Redis Cluster, on Sentinel
// (before and during a failover) and on a TLS Redis with ACL credentials.

const topoRules = `
defaults:
  ttl: 1h
routes:
` + dealsAndHeldRoutes

// topoUpstream counts executions per forwarded Idempotency-Key.
type topoUpstream struct {
	fake
	calls counter
}

func newTopoUpstream(t testing.TB) *topoUpstream {
	u := &topoUpstream{}
	u.fake = startFake(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := forwardedKey(r)
		n, _ := u.calls.add(key)
		if code, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
			c, _ := strconv.Atoi(code)
			w.WriteHeader(c)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"D-%s-%d"}`, key, n)
	})
	return u
}

func (u *topoUpstream) count(key string) int { return u.calls.count(key) }

// topoNoCrossSlot fails when the gateway ever logged a CROSSSLOT error.
func topoNoCrossSlot(t *testing.T, gws ...*gateway) {
	t.Helper()
	for i, gw := range gws {
		if strings.Contains(gw.logs.String(), "CROSSSLOT") {
			t.Errorf("gateway %d logged CROSSSLOT:\n%s", i, gw.logs.String())
		}
	}
}

// topoFlow runs the full flow through gw and returns the upstream: n keys
// claimed, completed and replayed; a reused key with another payload (422);
// an upstream 500 held as outcome unknown (409); the operator listing by
// state and route (paged); an operator release after which the retry
// executes once more.
func topoFlow(t *testing.T, gw *gateway, up *topoUpstream, prefix string, n int) {
	t.Helper()
	first := map[string][]byte{}
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		r := send(t, "POST", gw.url+"/deals", fmt.Appendf(nil, `{"title":"deal %d"}`, i), "Idempotency-Key", key)
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first delivery of %s: %d %s", key, r.status, r.body)
		}
		first[key] = r.body
	}
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		r := send(t, "POST", gw.url+"/deals", fmt.Appendf(nil, `{ "title" : "deal %d" }`, i), "Idempotency-Key", key)
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, first[key]) {
			t.Fatalf("retry of %s: %d replayed=%q %s, want the replay of %s", key, r.status, r.header.Get("Idempotent-Replayed"), r.body, first[key])
		}
		if c := up.count(key); c != 1 {
			t.Fatalf("%s executed %d times, want 1", key, c)
		}
	}

	mismatch := send(t, "POST", gw.url+"/deals", []byte(`{"title":"something else"}`), "Idempotency-Key", prefix+"-0")
	if mismatch.status != http.StatusUnprocessableEntity || !strings.HasSuffix(fmt.Sprint(mismatch.problem(t)["type"]), "#key-reused") {
		t.Fatalf("reused key, other payload: %d %s, want 422 key-reused", mismatch.status, mismatch.body)
	}

	held := prefix + "-held"
	if r := send(t, "POST", gw.url+"/status/500", []byte(`{}`), "Idempotency-Key", held); r.status != http.StatusInternalServerError {
		t.Fatalf("upstream 500: client got %d %s", r.status, r.body)
	}
	r := send(t, "POST", gw.url+"/status/500", []byte(`{}`), "Idempotency-Key", held)
	p := r.problem(t)
	heldID, _ := p["record_id"].(string)
	if r.status != http.StatusConflict || !strings.HasSuffix(fmt.Sprint(p["type"]), "#outcome-unknown") || len(heldID) != 32 {
		t.Fatalf("retry after a 500: %d %s, want 409 outcome-unknown with the record id", r.status, r.body)
	}
	if c := up.count(held); c != 1 {
		t.Fatalf("held key executed %d times, want 1", c)
	}

	completed := adminList(t, gw, "state=completed&route=deals", 7)
	if len(completed) != n {
		t.Fatalf("operator listing: %d completed deals, want %d", len(completed), n)
	}
	ids := map[string]bool{}
	for _, rec := range completed {
		ids[rec.ID] = true
		if rec.Attempts != 3 && rec.Attempts != 2 || rec.Executions != 1 || rec.Status != http.StatusCreated {
			t.Fatalf("listed record %+v: want 1 execution, status 201", rec)
		}
	}
	for i := range n {
		if id := recordID("deals", "", fmt.Sprintf("%s-%d", prefix, i)); !ids[id] {
			t.Fatalf("record %s of key %s-%d not listed", id, prefix, i)
		}
	}
	unknown := adminList(t, gw, "state=outcome_unknown", 0)
	if len(unknown) != 1 || unknown[0].ID != heldID || unknown[0].Route != "held" || unknown[0].Reason != "upstream_5xx" {
		t.Fatalf("outcome_unknown listing %+v, want only %s", unknown, heldID)
	}

	var released adminRecord
	adminJSON(t, gw, "POST", "/idempotency/records/"+heldID+"/release", "", &released)
	if released.State != "released" || released.Reason != "operator" {
		t.Fatalf("release: %+v", released)
	}
	if r := send(t, "POST", gw.url+"/status/500", []byte(`{}`), "Idempotency-Key", held); r.status != http.StatusInternalServerError {
		t.Fatalf("retry after the release: %d %s, want it to execute (the upstream's 500)", r.status, r.body)
	}
	if c := up.count(held); c != 2 {
		t.Fatalf("held key executed %d times after the release, want 2", c)
	}
}

// TestTopologyCluster: the full flow through the real binary on a
// three-master Redis Cluster. Records land on every master, the operator
// listing walks all of them, and nothing ever answers CROSSSLOT.
func TestTopologyCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	up := newTopoUpstream(t)
	var addrs []string
	for _, a := range cl.Addrs() {
		addrs = append(addrs, "redis://"+a)
	}
	gw := startGateway(t, gatewayConfig{store: strings.Join(addrs, " "), extra: withSecret("cluster"), upstream: up.addr(), rules: topoRules})
	const n = 24
	topoFlow(t, gw, up, "cl", n)
	for _, node := range cl.Nodes {
		size, err := node.Client(t).DBSize(context.Background()).Result()
		if err != nil || size == 0 {
			t.Errorf("master %s holds %d keys (%v): records should spread over every master", node.Addr, size, err)
		}
	}
	topoNoCrossSlot(t, gw)
}

// TestTopologySentinel: the full flow through the real binary on a master,
// a replica and three sentinels, with wait_replicas 1: every claim and
// completion is on the replica by the time the client has its answer.
func TestTopologySentinel(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	sentinels := redistest.StartSentinels(t, master, "idem", redistest.SentinelOptions{Replicas: 1})
	up := newTopoUpstream(t)
	var addrs []string
	for _, s := range sentinels {
		addrs = append(addrs, s.Addr)
	}
	gw := startGateway(t, gatewayConfig{
		store:    strings.Join(addrs, " "),
		extra:    withSecret("master_name idem\n\t\twait_replicas 1\n\t\twait_timeout 500ms"),
		upstream: up.addr(), rules: topoRules,
	})
	const n = 12
	topoFlow(t, gw, up, "se", n)
	ctx := context.Background()
	rs := redis.New(replica.Client(t), "", 0)
	for i := range n {
		id := recordID("deals", "", fmt.Sprintf("se-%d", i))
		if rec, err := rs.Get(ctx, id); err != nil || rec == nil || rec.State != store.StateCompleted {
			t.Fatalf("replica's copy of %s: %+v, %v; want completed", id, rec, err)
		}
	}
	if strings.Contains(gw.logs.String(), "fewer replicas") {
		t.Errorf("replica shortfall with a healthy replica:\n%s", gw.logs.String())
	}
	topoNoCrossSlot(t, gw)
}

// TestTopologyTLSAuth: a TLS-only Redis with a private CA (tls_ca_file)
// whose default user may only PING and INFO, so that every record operation
// needs the ACL user given through {env.*} placeholders. A wrong password
// fails the config (caddy validate) without showing the password; the
// right one serves the flow, and no log line holds the password.
func TestTopologyTLSAuth(t *testing.T) {
	const user, pass = "idemgate", "topo-s3cret-pw"
	srv := redistest.StartTLS(t,
		"--user", "default", "on", "nopass", "~*", "+ping", "+info",
		"--user", user, "on", ">"+pass, "~*", "&*", "+@all")
	t.Setenv("TOPO_REDIS_USER", user)
	t.Setenv("TOPO_REDIS_PASS", pass)
	up := newTopoUpstream(t)
	gw := startGateway(t, gatewayConfig{
		store: "rediss://" + srv.Addr,
		extra: "username {env.TOPO_REDIS_USER}\n\t\tpassword {env.TOPO_REDIS_PASS}\n\t\t" +
			withSecret("tls_ca_file "+srv.CAFile()+"\n\t\ttls_server_name "+redistest.TLSServerName),
		upstream: up.addr(), rules: topoRules,
	})
	topoFlow(t, gw, up, "tls", 4)

	validate := func(password string) (string, error) {
		cmd := gw.command("validate", "--config", gw.caddyfile, "--adapter", "caddyfile")
		cmd.Env = append(cmd.Env, "TOPO_REDIS_PASS="+password)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := validate(pass); err != nil {
		t.Fatalf("validate with the right password: %v\n%s", err, out)
	}
	out, err := validate("not-the-password")
	if err == nil || !strings.Contains(out, "WRONGPASS") || strings.Contains(out, "not-the-password") {
		t.Fatalf("validate with a wrong password: %v\n%s\nwant WRONGPASS without the password", err, out)
	}
	if strings.Contains(gw.logs.String(), pass) {
		t.Fatal("the gateway log holds the Redis password")
	}
	// The records were written by the ACL user: the restricted default
	// user cannot even read them.
	if err := srv.Client(t).Get(context.Background(), "x").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("default user GET: %v, want NOPERM", err)
	}
}

// topoDelivery is one first delivery during the failover test.
type topoDelivery struct {
	key    string
	gw     int // 0: no wait_replicas, 1: wait_replicas 1
	status int // 0: transport error
	at     time.Time
}

// TestTopologySentinelFailover kills the Sentinel master (SIGKILL) under
// traffic through two gateways, one with wait_replicas 1. The sentinels
// promote the replica; requests fail during the failover (503, the store
// is unavailable), then recover without restarting anything. Afterwards
// every key whose first delivery was acknowledged (201) is delivered
// again: those whose record reached the replica (now the master) are never
// executed again; the others show the asynchronous-replication window in
// which an acknowledged claim can be lost, which wait_replicas closes
// (every such key on the waiting gateway must have been reported short).
func TestTopologySentinelFailover(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	sentinels := redistest.StartSentinels(t, master, "idem", redistest.SentinelOptions{
		Replicas: 1, DownAfter: time.Second, FailoverTimeout: 3 * time.Second,
	})
	up := newTopoUpstream(t)
	var addrs []string
	for _, s := range sentinels {
		addrs = append(addrs, s.Addr)
	}
	sentinelAddrs := strings.Join(addrs, " ")
	gws := []*gateway{
		startGateway(t, gatewayConfig{store: sentinelAddrs, extra: withSecret("master_name idem\n\t\top_timeout 1s"),
			upstream: up.addr(), rules: topoRules}),
		startGateway(t, gatewayConfig{store: sentinelAddrs, extra: withSecret("master_name idem\n\t\top_timeout 1s\n\t\twait_replicas 1\n\t\twait_timeout 100ms"),
			upstream: up.addr(), rules: topoRules}),
	}

	// Traffic: workers deliver new keys, alternating the gateways, until
	// the test has seen the failover and 200 answers after it.
	const workers = 6
	var (
		mu         sync.Mutex
		deliveries []topoDelivery
		killed     atomic.Bool
		okAfter    atomic.Int64
	)
	httpc := &http.Client{Timeout: 10 * time.Second}
	stop := background(workers, 100000, 5*time.Millisecond, func(w, i int) {
		d := topoDelivery{key: fmt.Sprintf("fo-%d-%d", w, i), gw: (w + i) % 2}
		r, _ := do(httpc, "POST", gws[d.gw].url+"/deals", []byte(`{"title":"failover"}`), "Idempotency-Key", d.key)
		d.status = r.status // 0 when the request got no answer
		d.at = time.Now()
		mu.Lock()
		deliveries = append(deliveries, d)
		mu.Unlock()
		if killed.Load() && d.status == http.StatusCreated {
			okAfter.Add(1)
		}
	})
	time.Sleep(time.Second)
	killedAt := time.Now()
	master.Kill()
	killed.Store(true)
	recovered := false
	for range 600 { // 30s at most
		if okAfter.Load() >= 200 && sentinels[0].MasterPort(t, "idem") == replica.Port {
			recovered = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if !recovered {
		t.Fatalf("no recovery within 30s of killing the master: %d successes since, sentinel says master port %d (replica %d)",
			okAfter.Load(), sentinels[0].MasterPort(t, "idem"), replica.Port)
	}

	var before, failed, after int
	var lastFailure time.Time
	for _, d := range deliveries {
		switch {
		case d.at.Before(killedAt):
			before++
		case d.status == http.StatusCreated:
			after++
		default:
			failed++
			if d.at.After(lastFailure) {
				lastFailure = d.at
			}
			if d.status != http.StatusServiceUnavailable && d.status != 0 {
				t.Errorf("delivery %s during the failover: status %d, want 503 (store unavailable)", d.key, d.status)
			}
		}
	}
	window := time.Duration(0)
	if !lastFailure.IsZero() {
		window = lastFailure.Sub(killedAt)
	}
	t.Logf("deliveries: %d before the kill, %d failed after it (last failure %v after the kill), %d succeeded after it",
		before, failed, window.Round(time.Millisecond), after)
	if failed == 0 {
		t.Error("no request failed while the master was down: was it really killed?")
	}

	// Second delivery of every key, after the failover. The new master
	// is read directly first to tell replicated records from lost ones.
	ctx := context.Background()
	newMaster := redis.New(goredis.NewClient(&goredis.Options{Addr: replica.Addr, DisableIdentity: true}), "", 0)
	t.Cleanup(func() { _ = newMaster.Close() })
	shortLogged := gws[1].logs.String()
	var acked, unacked, replayed, conflicts, lost, reexecuted int
	lostByGW := [2]int{}
	for _, d := range deliveries {
		rec, err := newMaster.Get(ctx, recordID("deals", "", d.key))
		if err != nil {
			t.Fatalf("reading %s on the new master: %v", d.key, err)
		}
		if d.status != http.StatusCreated {
			// Not acknowledged: the claim failed (fail_closed), so the
			// upstream was never called. (A claim that landed always
			// answers the client with the upstream's response, even when
			// its completion fails.)
			unacked++
			if c := up.count(d.key); c != 0 {
				t.Errorf("%s failed with %d but executed %d times", d.key, d.status, c)
			}
			continue
		}
		acked++
		// Through the plain gateway: the waiting one would now wait out
		// wait_timeout on every write (its master has no replica left).
		r := send(t, "POST", gws[0].url+"/deals", []byte(`{"title":"failover"}`), "Idempotency-Key", d.key)
		switch {
		case rec == nil:
			// Acknowledged, not replicated: the documented window.
			lost++
			lostByGW[d.gw]++
			if up.count(d.key) > 1 {
				reexecuted++
			}
			if d.gw == 1 && !strings.Contains(shortLogged, recordID("deals", "", d.key)) {
				t.Errorf("%s was acknowledged through the wait_replicas gateway, lost in the failover, and never reported short", d.key)
			}
		case rec.State == store.StateCompleted:
			replayed++
			if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%s (replicated, completed): retry got %d %s, want the replay", d.key, r.status, r.body)
			}
		default:
			// The claim reached the replica, its completion did not.
			conflicts++
			if r.status != http.StatusConflict {
				t.Errorf("%s (replicated as %s): retry got %d %s, want 409", d.key, rec.State, r.status, r.body)
			}
		}
		if rec != nil {
			if c := up.count(d.key); c != 1 {
				t.Errorf("%s: acknowledged and replicated, executed %d times", d.key, c)
			}
		}
	}
	t.Logf("acknowledged keys: %d; after the failover %d replayed, %d held by a replicated claim (409), %d lost by asynchronous replication "+
		"(%d through the plain gateway, %d through wait_replicas), %d executed again; %d unacknowledged keys, none executed",
		acked, replayed, conflicts, lost, lostByGW[0], lostByGW[1], reexecuted, unacked)
	if acked == 0 || replayed == 0 {
		t.Fatalf("acknowledged %d, replayed %d: the test saw no traffic", acked, replayed)
	}

	// The waiting gateway keeps serving on a master that has no replica
	// left: every write is short, counted, logged, never failed.
	key := "fo-after"
	if r := send(t, "POST", gws[1].url+"/deals", []byte(`{}`), "Idempotency-Key", key); r.status != http.StatusCreated {
		t.Fatalf("wait_replicas gateway without a replica: %d %s", r.status, r.body)
	}
	if !strings.Contains(metricsText(t, gws[1]), `idemgate_store_wait_short_total{op="claim"}`) {
		t.Errorf("no idemgate_store_wait_short_total for claims in the metrics")
	}
	topoNoCrossSlot(t, gws...)
}
