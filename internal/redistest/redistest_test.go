package redistest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartStopRestart(t *testing.T) {
	s := Start(t, "--maxmemory", "64mb")
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") || s.Port <= 0 {
		t.Fatalf("Addr %q Port %d: want a loopback address with a port", s.Addr, s.Port)
	}
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	mm, err := c.ConfigGet(ctx, "maxmemory").Result()
	if err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	if got := mm["maxmemory"]; got != fmt.Sprint(64<<20) {
		t.Fatalf("extra args not applied: maxmemory = %q", got)
	}
	for _, p := range []string{"save", "appendonly", "bind"} {
		v, err := c.ConfigGet(ctx, p).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", p, err)
		}
		want := map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"}[p]
		if v[p] != want {
			t.Errorf("%s = %q, want %q", p, v[p], want)
		}
	}

	s.Stop()
	if s.Running() {
		t.Fatal("Running() after Stop")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded against a stopped server")
	}
	s.Stop() // idempotent

	port := s.Port
	s.Restart(t)
	if s.Port != port {
		t.Fatalf("Restart moved the port from %d to %d", port, s.Port)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after Restart EXISTS k = %d, %v; want an empty data set", n, err)
	}
}

func TestTwoServersAreIndependent(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Port == b.Port {
		t.Fatalf("both servers on port %d", a.Port)
	}
	ctx := context.Background()
	if err := a.Client(t).Set(ctx, "only-a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Client(t).Exists(ctx, "only-a").Result(); err != nil || n != 0 {
		t.Fatalf("b sees a's key: %d, %v", n, err)
	}
}

// recordingTB captures Skip and Fatal instead of acting on them.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestMissingBinary(t *testing.T) {
	t.Setenv(BinaryEnv, "/nonexistent/redis-server-for-test")
	if Available() {
		t.Fatal("Available() with a missing binary")
	}
	for _, tc := range []struct {
		require  string
		wantSkip bool
	}{
		{"", true},
		{"0", true},
		{"1", false},
	} {
		t.Run("require="+tc.require, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.require)
			r := &recordingTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Start(r)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("Start hung")
			}
			if tc.wantSkip {
				if r.skipped == "" || r.fatal != "" {
					t.Fatalf("skipped=%q fatal=%q, want a skip", r.skipped, r.fatal)
				}
				if !strings.Contains(r.skipped, "redis-server not available") || !strings.Contains(r.skipped, RequireEnv+"=1") {
					t.Fatalf("skip message not clear: %q", r.skipped)
				}
			} else if r.fatal == "" || r.skipped != "" {
				t.Fatalf("skipped=%q fatal=%q, want a failure", r.skipped, r.fatal)
			}
		})
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	cc := c.Client(t)
	ctx := context.Background()
	// Keys spread over the three masters; each node owns some of them.
	for i := range 30 {
		if err := cc.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET through the cluster: %v", err)
		}
	}
	for _, n := range c.Nodes {
		size, err := n.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if size == 0 {
			t.Errorf("node %s holds no keys: slots not spread", n.Addr)
		}
	}
	if err := cc.MSet(ctx, "{tag}a", 1, "{tag}b", 2).Err(); err != nil {
		t.Fatalf("same-slot MSET: %v", err)
	}
	if err := c.Nodes[0].Client(t).MSet(ctx, "a", 1, "b", 2).Err(); err == nil {
		t.Fatal("cross-slot MSET on one node succeeded; is this really a cluster?")
	}
}

func TestSentinel(t *testing.T) {
	master := Start(t)
	s := StartSentinel(t, master, "idem")
	ctx := context.Background()
	info, err := s.Client(t).Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "redis_mode:sentinel") {
		t.Fatalf("not a sentinel:\n%s", info)
	}
}

func TestReplicaFollowsMaster(t *testing.T) {
	master := Start(t)
	replica := StartReplica(t, master)
	ctx := context.Background()
	if err := master.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	mc := master.Client(t)
	if err := mc.Set(ctx, "k3", "v3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT proves the write reached the replica before we read it there.
	if n, err := mc.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the replica's acknowledgement", n, err)
	}
	if v, err := replica.Client(t).Get(ctx, "k3").Result(); err != nil || v != "v3" {
		t.Fatalf("replica has k3 = %q, %v", v, err)
	}
	if got := replica.Role(t); got != "slave" {
		t.Fatalf("replica role %q", got)
	}
	if err := replica.Client(t).Set(ctx, "x", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("write to the replica: %v, want READONLY", err)
	}
}

// TestSentinelsFailOver: three sentinels promote the replica once the
// master is killed.
func TestSentinelsFailOver(t *testing.T) {
	master := Start(t)
	replica := StartReplica(t, master)
	sentinels := StartSentinels(t, master, "idem", SentinelOptions{Replicas: 1})
	if len(sentinels) != 3 {
		t.Fatalf("%d sentinels", len(sentinels))
	}
	for _, s := range sentinels {
		if p := s.MasterPort(t, "idem"); p != master.Port {
			t.Fatalf("sentinel %s: master on port %d, want %d", s.Addr, p, master.Port)
		}
	}
	killed := time.Now()
	master.Kill()
	if master.Running() {
		t.Fatal("Running() after Kill")
	}
	deadline := time.Now().Add(30 * time.Second)
	for sentinels[0].MasterPort(t, "idem") != replica.Port || replica.Role(t) != "master" {
		if time.Now().After(deadline) {
			t.Fatalf("no failover to %s within 30s", replica.Addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failover took %v", time.Since(killed).Round(time.Millisecond))
	if err := replica.Client(t).Set(context.Background(), "after", "1", 0).Err(); err != nil {
		t.Fatalf("write to the promoted replica: %v", err)
	}
}

func TestStartTLS(t *testing.T) {
	s := StartTLS(t)
	if s.CAFile() == "" || s.TLSConfig() == nil {
		t.Fatal("no CA file or TLS config")
	}
	ctx := context.Background()
	if err := s.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS: %v", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1, DisableIdentity: true})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("plain-text PING to the TLS port succeeded")
	}
}

// TestLaunch: the starter without a test, as the load benchmark uses it.
func TestLaunch(t *testing.T) {
	if !Available() {
		if Required() {
			t.Fatalf("redis-server not available; %s=1 requires it", RequireEnv)
		}
		t.Skip("redis-server not available")
	}
	s, err := Launch(t.TempDir(), "--maxmemory", "32mb")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	pid := s.Pid()
	c := s.newClient()
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO: %v", err)
	}
	if !strings.Contains(info, fmt.Sprintf("process_id:%d\r\n", pid)) {
		t.Errorf("Pid() = %d, INFO server says otherwise", pid)
	}
	if mm, err := c.ConfigGet(context.Background(), "maxmemory").Result(); err != nil || mm["maxmemory"] != fmt.Sprint(32<<20) {
		t.Errorf("extra args not applied: %v, %v", mm, err)
	}
	s.Stop()
	if s.Pid() != 0 || s.Running() {
		t.Error("Pid or Running after Stop")
	}
}
