package caddymodule

import (
	"context"
	"net/http"
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
	"github.com/idemgate/idemgate/store/redis"
)

func TestStoreOptions(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_PASS", "pa55")
	c := StoreConfig{Addresses: []string{"rediss://app:{env.IDEMGATE_TEST_PASS}@10.0.0.5:6380/3"}}
	opts, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Addrs) != 1 || opts.Addrs[0] != "10.0.0.5:6380" || opts.Username != "app" || opts.Password != "pa55" || opts.DB != 3 || opts.TLS == nil {
		t.Errorf("options = %+v", opts)
	}
	for _, bad := range []string{"http://h:1", "redis://h:1/x", "redis:///0"} {
		if _, err := (StoreConfig{Addresses: []string{bad}}).options(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := (StoreConfig{Addresses: []string{"redis://u:secret@h:1/x"}}).options(); err == nil || strings.Contains(err.Error(), "secret") {
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
		opts, err := (StoreConfig{Addresses: []string{tc.addr}}).options()
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
		opts, err := (StoreConfig{Addresses: []string{addr}, DB: 3}).options()
		if err != nil || opts.DB != want {
			t.Errorf("%s with db 3: DB %d, %v; want %d", addr, opts.DB, err, want)
		}
	}
}

// TestStoreOptionsContradictions: options that contradict each other are
// errors naming them, never a silent choice; no error shows a password.
func TestStoreOptionsContradictions(t *testing.T) {
	for _, tc := range []struct {
		cfg  StoreConfig
		want string
	}{
		{StoreConfig{Addresses: []string{"h:1", "h:2"}, Cluster: true, MasterName: "mymaster"},
			"cluster and master_name contradict each other: a Redis Cluster has no Sentinel master; set one of them"},
		{StoreConfig{Addresses: []string{"h:1"}, TLSServerName: "redis.internal"},
			"tls_server_name is set but TLS is not (use tls or rediss://)"},
		{StoreConfig{Addresses: []string{"redis://u:hunter2@h:1?pool_size=5"}},
			`store address "redis://u:xxxxx@h:1?pool_size=5": options in the URL are not read; use the store options (pool_size, dial_timeout, ...)`},
		{StoreConfig{Addresses: []string{"unix:///run/redis.sock"}},
			`store address "unix:///run/redis.sock": scheme must be redis or rediss`},
		{StoreConfig{Addresses: []string{"redis://u:hunter2@h:1/a/b"}},
			`store address "redis://u:xxxxx@h:1/a/b": redis: invalid URL path: /a/b`},
		{StoreConfig{Addresses: []string{"redis://u:hunter2@h:port"}},
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
	if _, err := (StoreConfig{Addresses: []string{"rediss://h:1"}, TLSServerName: "redis.internal"}).options(); err != nil {
		t.Errorf("tls_server_name with rediss://: %v", err)
	}
	if _, err := (StoreConfig{Addresses: []string{"h:1"}, TLS: true, TLSServerName: "redis.internal"}).options(); err != nil {
		t.Errorf("tls_server_name with tls: %v", err)
	}
}

// TestPoolKey: configs share a connection exactly when their resolved
// options are the same.
func TestPoolKey(t *testing.T) {
	key := func(c StoreConfig) string {
		t.Helper()
		opts, err := c.options()
		if err != nil {
			t.Fatal(err)
		}
		return c.poolKey(opts)
	}
	a := StoreConfig{Addresses: []string{"redis://127.0.0.1:6379"}}
	same := StoreConfig{Addresses: []string{"127.0.0.1:6379"}}
	others := []StoreConfig{
		{Addresses: []string{"redis://127.0.0.1:6380"}},
		{Addresses: []string{"redis://127.0.0.1:6379"}, KeyPrefix: "other:"},
		{Addresses: []string{"redis://127.0.0.1:6379/1"}},
		{Addresses: []string{"redis://127.0.0.1:6379"}, Password: "x"},
		{},
		{Dir: "/var/lib/idemgate-a"},
		{Dir: "/var/lib/idemgate-b"},
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
	withEnv := StoreConfig{Addresses: []string{"{env.IDEMGATE_TEST_ADDR}"}}
	k1 := key(withEnv)
	t.Setenv("IDEMGATE_TEST_ADDR", "127.0.0.1:7001")
	if key(withEnv) == k1 {
		t.Errorf("placeholders not resolved before keying")
	}
	// One embedded store per directory, however the directory is written.
	wd, _ := os.Getwd()
	if key(StoreConfig{Dir: "data"}) != key(StoreConfig{Dir: filepath.Join(wd, "data")}) ||
		key(StoreConfig{Dir: "data", KeyPrefix: "x:"}) != key(StoreConfig{Dir: "data/"}) {
		t.Errorf("one directory, several pool keys")
	}
	if strings.Contains(key(StoreConfig{Addresses: []string{"h:1"}, Password: "hunter2"}), "hunter2") {
		t.Errorf("pool key holds the password")
	}
}

func TestStoreOptionsWaitAndCA(t *testing.T) {
	srv := redistest.StartTLS(t)
	ok := StoreConfig{Addresses: []string{"rediss://" + srv.Addr}, TLSCAFile: srv.CAFile(), TLSServerName: redistest.TLSServerName,
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
		cfg  StoreConfig
		want string
	}{
		{StoreConfig{WaitReplicas: 1}, "embedded store has none"},
		{StoreConfig{Addresses: []string{"h:1"}, WaitReplicas: -1}, "negative"},
		{StoreConfig{Addresses: []string{"h:1"}, WaitTimeout: caddy.Duration(time.Second)}, "wait_replicas is not"},
		{StoreConfig{Addresses: []string{"h:1"}, TLSCAFile: srv.CAFile()}, "TLS is not"},
		{StoreConfig{Addresses: []string{"rediss://h:1"}, TLSCAFile: "/nonexistent/ca.pem"}, "tls_ca_file"},
		{StoreConfig{Addresses: []string{"h:1"}, TLS: true, TLSCAFile: notPEM}, "no PEM certificate"},
	} {
		if _, err := tc.cfg.options(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
	key := func(c StoreConfig) string {
		t.Helper()
		opts, err := c.options()
		if err != nil {
			t.Fatal(err)
		}
		return c.poolKey(opts)
	}
	base := StoreConfig{Addresses: []string{"rediss://" + srv.Addr}}
	withWait := base
	withWait.WaitReplicas = 1
	withCA := base
	withCA.TLSCAFile = srv.CAFile()
	if k := key(base); k == key(withWait) || k == key(withCA) || key(withWait) == key(withCA) {
		t.Error("wait_replicas or tls_ca_file do not change the pool key")
	}

	// The CA file is what makes the private certificate trusted.
	u, err := stores.open(withCA, nil, zap.NewNop())
	if err != nil {
		t.Fatalf("TLS store with tls_ca_file: %v", err)
	}
	t.Cleanup(func() { _ = u.retire() })
	if err := u.engine.(*redis.Store).Client().Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.open(base, nil, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("TLS store without the CA: %v, want a certificate error", err)
	}
}

// TestEvictionPolicyWarning: a Redis whose maxmemory-policy may evict
// records is refused without allow_eviction, and with it warned about once
// per store connection, when it is opened;
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
			cfg := StoreConfig{Addresses: []string{"redis://" + srv.Addr}}
			if tc.warn {
				// Refused without allow_eviction, naming the policy.
				if _, err := stores.open(cfg, nil, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "maxmemory-policy "+tc.args[1]) {
					t.Fatalf("open without allow_eviction: %v, want an error naming %s", err, tc.args[1])
				}
				cfg.AllowEviction = true
			}
			for range 2 { // the second config shares the connection: no second warning
				u, err := stores.open(cfg, nil, zap.New(core))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = u.retire() })
			}
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

// TestWaitShortfallCountedNotFailed: with wait_replicas and no replica to
// acknowledge, requests are served all the same; each claim that took a
// key and each completion is counted in idemgate_store_wait_short_total
// and logged; a replay sends no WAIT.
func TestWaitShortfallCountedNotFailed(t *testing.T) {
	srv := redistest.Start(t)
	h, _ := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`, StoreConfig{Addresses: []string{"redis://" + srv.Addr}, WaitReplicas: 1, WaitTimeout: caddy.Duration(10 * time.Millisecond)})
	count := func(op string) float64 {
		var m dto.Metric
		if err := processMetrics.waitShort.WithLabelValues(op).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	claims, completes := count("claim"), count("complete")
	up := &counting{}
	if w := serve(h, up.next, "POST", "/deals", "{}", "Idempotency-Key", "w1"); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	if w := serve(h, up.next, "POST", "/deals", "{}", "Idempotency-Key", "w1"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if got := count("claim") - claims; got != 1 {
		t.Errorf("claim shortfalls counted: %v, want 1 (the replay does not wait)", got)
	}
	if got := count("complete") - completes; got != 1 {
		t.Errorf("complete shortfalls counted: %v, want 1", got)
	}
	if up.calls.Load() != 1 {
		t.Errorf("executions = %d", up.calls.Load())
	}
}

// TestWaitStrictRefusesClaim: with wait_replicas and wait_strict and no
// replica to acknowledge, a new key is not forwarded (not even on a
// fail_open route): 503 with Retry-After, and the claim is released, so a
// gateway without strict executes the same key at once (409 if the claim
// had been left in flight).
func TestWaitStrictRefusesClaim(t *testing.T) {
	srv := redistest.Start(t)
	rules := `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
  - name: open
    match: { path: /open }
    key: ["{header.Idempotency-Key}"]
    on_store_error: fail_open
`
	strict, _ := newHandler(t, rules, StoreConfig{Addresses: []string{"redis://" + srv.Addr}, WaitReplicas: 1, WaitStrict: true,
		WaitTimeout: caddy.Duration(10 * time.Millisecond)})
	up := &counting{}
	for _, path := range []string{"/deals", "/open"} {
		w := serve(strict, up.next, "POST", path, "{}", "Idempotency-Key", "s1")
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%s: strict claim without a replica: %d Retry-After %q %s, want 503 with Retry-After",
				path, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("forwarded %d times under wait_strict without a replica, want 0", n)
	}
	plain, _ := newHandler(t, rules, StoreConfig{Addresses: []string{"redis://" + srv.Addr}})
	if w := serve(plain, up.next, "POST", "/deals", "{}", "Idempotency-Key", "s1"); w.Code != http.StatusCreated {
		t.Fatalf("the same key without strict: %d %s, want 201 (the refused claim was released)", w.Code, w.Body)
	}
	// The completed key replays through the strict gateway.
	w := serve(strict, up.next, "POST", "/deals", "{}", "Idempotency-Key", "s1")
	if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay under wait_strict without a replica: %d %s", w.Code, w.Body)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}
