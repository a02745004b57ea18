package redis

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

func TestStoreOptions(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_PASS", "pa55")
	c := Module{Addresses: []string{"rediss://app:{env.IDEMGATE_TEST_PASS}@10.0.0.5:6380/3"}}
	opts, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Addrs) != 1 || opts.Addrs[0] != "10.0.0.5:6380" || opts.Username != "app" || opts.Password != "pa55" || opts.DB != 3 || opts.TLS == nil {
		t.Errorf("options = %+v", opts)
	}
	for _, bad := range []string{"http://h:1", "redis://h:1/x", "redis:///0"} {
		if _, err := (&Module{Addresses: []string{bad}}).options(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := (&Module{Addresses: []string{"redis://u:secret@h:1/x"}}).options(); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v must not show the password", err)
	}
}

// TestStoreAddresses: an address without a port means Redis's port 6379;
// URLs are read by go-redis's own parser.
func TestStoreAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr, want string
		db         int
		tls        bool
	}{
		{"redis://127.0.0.1", "127.0.0.1:6379", 0, false},
		{"redis://127.0.0.1/2", "127.0.0.1:6379", 2, false},
		{"rediss://redis.internal", "redis.internal:6379", 0, true},
		{"redis://[::1]", "[::1]:6379", 0, false},
		{"redis://[::1]:7000/1", "[::1]:7000", 1, false},
		{"redis://h:6380", "h:6380", 0, false},
		{"127.0.0.1", "127.0.0.1:6379", 0, false},
		{"redis.internal:7001", "redis.internal:7001", 0, false},
		{"[::1]:7002", "[::1]:7002", 0, false},
	} {
		opts, err := (&Module{Addresses: []string{tc.addr}}).options()
		if err != nil {
			t.Errorf("%s: %v", tc.addr, err)
			continue
		}
		if len(opts.Addrs) != 1 || opts.Addrs[0] != tc.want || opts.DB != tc.db || (opts.TLS != nil) != tc.tls {
			t.Errorf("%s: addrs %q db %d tls %v, want %s db %d tls %v", tc.addr, opts.Addrs, opts.DB, opts.TLS != nil, tc.want, tc.db, tc.tls)
		}
	}
}

// TestStoreURLDatabaseWins: a database in the URL wins over the db option,
// also database 0.
func TestStoreURLDatabaseWins(t *testing.T) {
	for addr, want := range map[string]int{"redis://h:1/0": 0, "redis://h:1/2": 2, "redis://h:1": 3, "h:1": 3} {
		opts, err := (&Module{Addresses: []string{addr}, DB: 3}).options()
		if err != nil || opts.DB != want {
			t.Errorf("%s with db 3: DB %d, %v; want %d", addr, opts.DB, err, want)
		}
	}
}

// TestStoreOptionsContradictions: options that contradict each other are
// errors naming them, never a silent choice; no error shows a password.
func TestStoreOptionsContradictions(t *testing.T) {
	for _, tc := range []struct {
		cfg  Module
		want string
	}{
		{Module{Addresses: []string{"h:1", "h:2"}, Cluster: true, MasterName: "mymaster"},
			"cluster and master_name contradict each other: a Redis Cluster has no Sentinel master; set one of them"},
		{Module{Addresses: []string{"h:1"}, TLSServerName: "redis.internal"},
			"tls_server_name is set but TLS is not (use tls or rediss://)"},
		{Module{Addresses: []string{"redis://u:hunter2@h:1?pool_size=5"}},
			`store address "redis://u:xxxxx@h:1?pool_size=5": options in the URL are not read; use the store options (pool_size, dial_timeout, ...)`},
		{Module{Addresses: []string{"unix:///run/redis.sock"}},
			`store address "unix:///run/redis.sock": scheme must be redis or rediss`},
		{Module{Addresses: []string{"redis://u:hunter2@h:1/a/b"}},
			`store address "redis://u:xxxxx@h:1/a/b": redis: invalid URL path: /a/b`},
		{Module{Addresses: []string{"redis://u:hunter2@h:port"}},
			`store address "redis://u:xxxxx@h:port": invalid port ":port" after host`},
	} {
		_, err := tc.cfg.options()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%+v:\n got %v\nwant %s", tc.cfg, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error %q shows the password", err)
		}
	}
	if _, err := (&Module{Addresses: []string{"rediss://h:1"}, TLSServerName: "redis.internal"}).options(); err != nil {
		t.Errorf("tls_server_name with rediss://: %v", err)
	}
	if _, err := (&Module{Addresses: []string{"h:1"}, TLS: true, TLSServerName: "redis.internal"}).options(); err != nil {
		t.Errorf("tls_server_name with tls: %v", err)
	}
}

// TestPoolKey: configs share a connection exactly when their resolved
// options are the same.
func TestPoolKey(t *testing.T) {
	key := func(c Module) string {
		t.Helper()
		opts, err := c.options()
		if err != nil {
			t.Fatal(err)
		}
		return c.poolKey(opts)
	}
	a := Module{Addresses: []string{"redis://127.0.0.1:6379"}}
	same := Module{Addresses: []string{"127.0.0.1:6379"}}
	others := []Module{
		{Addresses: []string{"redis://127.0.0.1:6380"}},
		{Addresses: []string{"redis://127.0.0.1:6379"}, KeyPrefix: "other:"},
		{Addresses: []string{"redis://127.0.0.1:6379/1"}},
		{Addresses: []string{"redis://127.0.0.1:6379"}, Password: "x"},
	}
	if key(a) != key(same) {
		t.Errorf("equal options, different keys")
	}
	seen := map[string]int{key(a): -1}
	for i, o := range others {
		k := key(o)
		if j, dup := seen[k]; dup {
			t.Errorf("config %d shares a pool key with %d: %q", i, j, k)
		}
		seen[k] = i
	}
	t.Setenv("IDEMGATE_TEST_ADDR", "127.0.0.1:7000")
	withEnv := Module{Addresses: []string{"{env.IDEMGATE_TEST_ADDR}"}}
	k1 := key(withEnv)
	t.Setenv("IDEMGATE_TEST_ADDR", "127.0.0.1:7001")
	if key(withEnv) == k1 {
		t.Errorf("placeholders not resolved before keying")
	}
	if strings.Contains(key(Module{Addresses: []string{"h:1"}, Password: "hunter2"}), "hunter2") {
		t.Errorf("pool key holds the password")
	}
}

func TestStoreOptionsWaitAndCA(t *testing.T) {
	t.Parallel()
	srv := redistest.StartTLS(t)
	ok := Module{Addresses: []string{"rediss://" + srv.Addr}, TLSCAFile: srv.CAFile(), TLSServerName: redistest.TLSServerName,
		WaitReplicas: 2, WaitTimeout: caddy.Duration(50 * time.Millisecond)}
	opts, err := ok.options()
	if err != nil {
		t.Fatal(err)
	}
	if opts.WaitReplicas != 2 || opts.WaitTimeout != 50*time.Millisecond || opts.TLS == nil || opts.TLS.RootCAs == nil || opts.TLS.ServerName != redistest.TLSServerName {
		t.Fatalf("options = %+v", opts)
	}
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Module
		want string
	}{
		{Module{WaitReplicas: 1}, "no address"},
		{Module{Addresses: []string{"h:1"}, WaitReplicas: -1}, "negative"},
		{Module{Addresses: []string{"h:1"}, WaitTimeout: caddy.Duration(time.Second)}, "wait_replicas is not"},
		{Module{Addresses: []string{"h:1"}, TLSCAFile: srv.CAFile()}, "TLS is not"},
		{Module{Addresses: []string{"rediss://h:1"}, TLSCAFile: "/nonexistent/ca.pem"}, "tls_ca_file"},
		{Module{Addresses: []string{"h:1"}, TLS: true, TLSCAFile: notPEM}, "no PEM certificate"},
	} {
		if _, err := tc.cfg.options(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
	key := func(c Module) string {
		t.Helper()
		opts, err := c.options()
		if err != nil {
			t.Fatal(err)
		}
		return c.poolKey(opts)
	}
	base := Module{Addresses: []string{"rediss://" + srv.Addr}}
	withWait := base
	withWait.WaitReplicas = 1
	withCA := base
	withCA.TLSCAFile = srv.CAFile()
	if k := key(base); k == key(withWait) || k == key(withCA) || key(withWait) == key(withCA) {
		t.Error("wait_replicas or tls_ca_file do not change the pool key")
	}

	// The CA file is what makes the private certificate trusted.
	e, err := openModule(t, &withCA)
	if err != nil {
		t.Fatalf("TLS store with tls_ca_file: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if err := e.(*Store).Client().Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := openModule(t, &base); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("TLS store without the CA: %v, want a certificate error", err)
	}
}

// openModule provisions, validates and opens m as Caddy would.
func openModule(t testing.TB, m *Module) (store.Engine, error) {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := m.Provision(ctx); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m.OpenEngine()
}

// TestEvictionPolicyWarning: a Redis whose maxmemory-policy may evict
// records is refused without allow_eviction, and with it warned about when
// the store connection is opened (once per connection: the pool shares it);
// noeviction is not, and a Redis that refuses CONFIG still serves.
func TestEvictionPolicyWarning(t *testing.T) {
	for _, tc := range []struct {
		args []string
		warn bool
		info bool
	}{
		{[]string{"--maxmemory-policy", "allkeys-lru"}, true, false},
		{[]string{"--maxmemory-policy", "volatile-ttl"}, true, false},
		{[]string{"--maxmemory-policy", "noeviction"}, false, false},
		{[]string{"--rename-command", "CONFIG", ""}, false, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			core, logs := observer.New(zap.DebugLevel)
			logTo(t, zap.New(core))
			cfg := Module{Addresses: []string{"redis://" + srv.Addr}}
			if tc.warn {
				// Refused without allow_eviction, naming the policy.
				if _, err := openModule(t, &cfg); err == nil || !strings.Contains(err.Error(), "maxmemory-policy "+tc.args[1]) {
					t.Fatalf("open without allow_eviction: %v, want an error naming %s", err, tc.args[1])
				}
				cfg.AllowEviction = true
			}
			e, err := openModule(t, &cfg) // once per store connection
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			warns := logs.FilterMessageSnippet("may evict idempotency records").All()
			if tc.warn != (len(warns) == 1) || len(warns) > 1 {
				t.Fatalf("%d warnings, want warn=%v once: %+v", len(warns), tc.warn, logs.All())
			}
			if tc.warn {
				if w := warns[0]; w.Level != zap.WarnLevel || w.ContextMap()["maxmemory_policy"] != tc.args[1] || w.ContextMap()["redis"] != srv.Addr {
					t.Fatalf("warning %+v", w)
				}
			}
			if got := logs.FilterMessageSnippet("could not read the Redis eviction policy").Len(); (got == 1) != tc.info {
				t.Fatalf("%d could-not-read lines, want %v", got, tc.info)
			}
		})
	}
}

// TestStoreUpGauge: idemgate_store_up drops to 0 at the first claim that
// cannot reach Redis and is back at 1 once Redis answers again, also
// without traffic.
func TestStoreUpGauge(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := Module{Addresses: []string{"redis://" + srv.Addr}, OpTimeout: caddy.Duration(300 * time.Millisecond)}
	e, err := openModule(t, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	label := cfg.label()
	if got := gaugeOf(t, label); got != 1 {
		t.Fatalf("idemgate_store_up with Redis up = %v, want 1", got)
	}
	srv.Stop()
	if _, err := e.Claim(context.Background(), storetest.ClaimReq(storetest.NewID(t), "tok")); err == nil {
		t.Fatal("a claim with Redis stopped: no error")
	}
	if got := gaugeOf(t, label); got != 0 {
		t.Fatalf("idemgate_store_up with Redis stopped = %v, want 0", got)
	}
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for gaugeOf(t, label) != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := gaugeOf(t, label); got != 1 {
		t.Fatalf("idemgate_store_up 10s after Redis came back = %v, want 1", got)
	}
}

// logTo sends the store's messages to l for the test.
func logTo(t *testing.T, l *zap.Logger) {
	logOverride.Store(l)
	t.Cleanup(func() { logOverride.Store(nil) })
}

// TestWaitShortfallCounted: with wait_replicas and no replica to
// acknowledge, each claim that took a key and each completion is counted
// in idemgate_store_wait_short_total and logged; a replay sends no WAIT.
func TestWaitShortfallCounted(t *testing.T) {
	srv := redistest.Start(t)
	core, logs := observer.New(zap.DebugLevel)
	logTo(t, zap.New(core))
	e, err := openModule(t, &Module{Addresses: []string{"redis://" + srv.Addr}, WaitReplicas: 1, WaitTimeout: caddy.Duration(10 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	count := func(op string) float64 {
		var m dto.Metric
		if err := waitShort.WithLabelValues(op).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	claims, completes := count("claim"), count("complete")
	ctx := context.Background()
	id := storetest.NewID(t)
	storetest.MustClaim(t, e, storetest.ClaimReq(id, "tok"))
	ok, err := e.Complete(ctx, storetest.Completion(id, "tok", storetest.SampleResult(), time.Hour))
	storetest.MustOK(t, "Complete", ok, err)
	if res := storetest.MustClaim(t, e, storetest.ClaimReq(id, "tok2")); res.Claimed {
		t.Fatal("the retry claimed a completed record")
	}
	if got := count("claim") - claims; got != 1 {
		t.Errorf("claim shortfalls counted: %v, want 1 (the replay does not wait)", got)
	}
	if got := count("complete") - completes; got != 1 {
		t.Errorf("complete shortfalls counted: %v, want 1", got)
	}
	if n := logs.FilterMessageSnippet("fewer replicas than wait_replicas acknowledged").Len(); n != 1 {
		t.Errorf("%d shortfall lines, want 1 (later ones within %v are counted, not logged)", n, waitShortLogEvery)
	}
}
