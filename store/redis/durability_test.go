package redis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestWaitReplicas: with WaitReplicas a claim that takes the record is
// EVALSHA then WAIT on the same connection, a completion one round trip of
// both (the server counts one WAIT per call, so it waited for that
// connection's write), the replica has the record as soon as the call
// returns, and replays, renewals, releases and holds send no WAIT. Without a replica the calls still succeed and the
// shortfall is reported.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	short := &reports[WaitShortfall]{}
	s, err := Open(Options{Addrs: []string{master.Addr}, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond, OnWaitShort: short.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sent := &redistest.CommandLog{}
	s.Client().AddHook(sent)
	admin, onReplica := master.Client(t), replica.Client(t)
	ctx := context.Background()

	// Warm the connection: go-redis sends HELLO on a connection's first
	// pipeline, once, which is not a per-call cost.
	warm := storetest.NewID(t)
	storetest.MustClaim(t, s, storetest.ClaimReq(warm, "warm-up"))
	if _, err := s.Complete(ctx, storetest.Completion(warm, "warm-up", storetest.SampleResult(), time.Hour)); err != nil {
		t.Fatal(err)
	}
	id := storetest.NewID(t)
	steps := []struct {
		name string
		call func() error
		want []string // client side
		wait int64    // WAITs the master counts
	}{
		{"Claim", func() error { _, err := s.Claim(ctx, storetest.ClaimReq(id, "tok")); return err }, []string{"evalsha", "wait"}, 1},
		{"Renew", func() error { _, err := s.Renew(ctx, id, "tok", time.Minute); return err }, []string{"evalsha"}, 0},
		{"Complete", func() error {
			ok, err := s.Complete(ctx, storetest.Completion(id, "tok", storetest.SampleResult(), time.Hour))
			storetest.MustOK(t, "Complete", ok, err)
			return nil
		}, []string{"pipeline:evalsha", "pipeline:wait"}, 1},
		{"Claim (replay)", func() error { _, err := s.Claim(ctx, storetest.ClaimReq(id, "tok2")); return err }, []string{"evalsha"}, 0},
		{"Release", func() error { _, err := s.Release(ctx, id, "x", time.Hour); return err }, []string{"evalsha"}, 0},
		{"MarkUnknown", func() error { _, err := s.MarkUnknown(ctx, id, "x", "r", time.Hour); return err }, []string{"evalsha"}, 0},
	}
	for _, st := range steps {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		sent.Take()
		if err := st.call(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := sent.Take(); !slices.Equal(got, st.want) {
			t.Errorf("%s: client sent %q, want %q", st.name, got, st.want)
		}
		stats := redistest.CommandStats(t, admin)
		if stats["evalsha"] != 1 || stats["wait"] != st.wait || stats["eval"] != 0 {
			t.Errorf("%s: master counted evalsha=%d wait=%d eval=%d, want 1, %d, 0", st.name, stats["evalsha"], stats["wait"], stats["eval"], st.wait)
		}
		if st.name == "Complete" {
			// Waited for: the replica has the completed record already.
			if got, err := onReplica.GetRange(ctx, s.Key(id), 1, 1).Result(); err != nil || got != string(stCompleted) {
				t.Fatalf("replica right after Complete: state %q, %v", got, err)
			}
		}
	}
	if l := short.take(); len(l) != 0 {
		t.Fatalf("shortfalls with a live replica: %+v", l)
	}

	replica.Stop()
	id2 := storetest.NewID(t)
	began := time.Now()
	res, err := s.Claim(ctx, storetest.ClaimReq(id2, "tok"))
	if err != nil || !res.Claimed {
		t.Fatalf("Claim without the replica: %+v, %v; want a claim all the same", res, err)
	}
	ok, err := s.Complete(ctx, storetest.Completion(id2, "tok", storetest.SampleResult(), time.Hour))
	storetest.MustOK(t, "Complete without the replica", ok, err)
	if took := time.Since(began); took < 2*300*time.Millisecond {
		t.Errorf("claim+complete took %v: WAIT did not wait for its timeout", took)
	}
	l := short.take()
	if len(l) != 2 || l[0].Op != "claim" || l[1].Op != "complete" {
		t.Fatalf("shortfalls = %+v, want claim and complete", l)
	}
	for _, ws := range l {
		if ws.ID != id2 || ws.Acked != 0 || ws.Wanted != 1 || ws.Err != nil {
			t.Errorf("shortfall %+v, want id %s acked 0 of 1", ws, id2)
		}
	}
	if r := storetest.MustGet(t, s, id2); r.State != store.StateCompleted {
		t.Fatalf("record after unacknowledged writes: %s", r.State)
	}
}

// TestWaitReplicasScriptFlush: after SCRIPT FLUSH a waiting claim falls
// back to EVAL (and still waits once for the write that happened).
func TestWaitReplicasScriptFlush(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	redistest.StartReplica(t, master)
	short := &reports[WaitShortfall]{}
	s, err := Open(Options{Addrs: []string{master.Addr}, WaitReplicas: 1, OnWaitShort: short.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	storetest.MustClaim(t, s, storetest.ClaimReq(storetest.NewID(t), "warm-up")) // see TestWaitReplicas
	if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sent := &redistest.CommandLog{}
	s.Client().AddHook(sent)
	res, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok"))
	if err != nil || !res.Claimed {
		t.Fatalf("Claim after SCRIPT FLUSH: %+v, %v", res, err)
	}
	if got, want := sent.Take(), []string{"evalsha", "eval", "wait"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
	if l := short.take(); len(l) != 0 {
		t.Fatalf("shortfalls: %+v", l)
	}
}

// TestWaitReplicasCluster: on Cluster the WAIT goes to the node that owns
// the record (each master counts exactly one WAIT per script it ran), with
// no CROSSSLOT; masters without replicas report every write short.
func TestWaitReplicasCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	short := &reports[WaitShortfall]{}
	s, err := Open(Options{Addrs: cl.Addrs(), Cluster: true, WaitReplicas: 1, WaitTimeout: 5 * time.Millisecond, OnWaitShort: short.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for _, n := range cl.Nodes {
		if err := n.Client(t).ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const n = 30
	for range n {
		id := storetest.NewID(t)
		if c := storetest.MustClaim(t, s, storetest.ClaimReq(id, "tok")); !c.Claimed {
			t.Fatalf("claim %s: %+v", id, c)
		}
		ok, err := s.Complete(ctx, storetest.Completion(id, "tok", storetest.SampleResult(), time.Hour))
		storetest.MustOK(t, "Complete", ok, err)
	}
	total := int64(0)
	for _, node := range cl.Nodes {
		stats := redistest.CommandStats(t, node.Client(t))
		if stats["wait"] != stats["evalsha"] {
			t.Errorf("node %s: wait=%d evalsha=%d, want a WAIT beside each script", node.Addr, stats["wait"], stats["evalsha"])
		}
		total += stats["wait"]
	}
	if total != 2*n {
		t.Errorf("%d WAITs in all, want %d", total, 2*n)
	}
	if l := short.take(); len(l) != 2*n {
		t.Fatalf("%d shortfalls, want %d (no replicas)", len(l), 2*n)
	}
}

func TestWaitOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Addrs: []string{"127.0.0.1:1"}, WaitReplicas: -1}, "negative"},
		{Options{Addrs: []string{"127.0.0.1:1"}, WaitReplicas: 1, WaitTimeout: -time.Second}, "negative"},
		{Options{Addrs: []string{"127.0.0.1:1"}, WaitReplicas: 1, WaitTimeout: 2 * time.Second}, "shorter than the op timeout"},
		{Options{Addrs: []string{"127.0.0.1:1"}, WaitReplicas: 1, OpTimeout: 50 * time.Millisecond}, "shorter than the op timeout"},
	} {
		if _, err := Open(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v) = %v, want an error about %q", tc.opts, err, tc.want)
		}
	}
}

// TestEvictionCheck: Open reports every master's maxmemory-policy; only
// noeviction is safe (volatile-* evicts keys with a TTL, and every record
// has one); a Redis that refuses CONFIG still opens.
func TestEvictionCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		policy string
		evicts bool
		err    bool
	}{
		{[]string{"--maxmemory-policy", "allkeys-lru"}, "allkeys-lru", true, false},
		{[]string{"--maxmemory-policy", "volatile-lru", "--maxmemory", "64mb"}, "volatile-lru", true, false},
		{[]string{"--maxmemory-policy", "noeviction"}, "noeviction", false, false},
		{[]string{"--rename-command", "CONFIG", ""}, "", false, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			srv := redistest.Start(t, tc.args...)
			var got []EvictionCheck
			s, err := Open(Options{Addrs: []string{srv.Addr}, AllowEviction: true, OnEvictionCheck: func(ec EvictionCheck) { got = append(got, ec) }})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if len(got) != 1 {
				t.Fatalf("%d checks, want 1: %+v", len(got), got)
			}
			ec := got[0]
			if ec.Addr != srv.Addr || ec.Policy != tc.policy || ec.Evicts() != tc.evicts || (ec.Err != nil) != tc.err {
				t.Fatalf("check = %+v (evicts %v), want policy %q evicts %v error %v", ec, ec.Evicts(), tc.policy, tc.evicts, tc.err)
			}
			if tc.policy == "volatile-lru" && ec.MaxMemory != 64<<20 {
				t.Errorf("maxmemory = %d", ec.MaxMemory)
			}
		})
	}
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		var mu sync.Mutex
		var got []string
		s, err := Open(Options{Addrs: cl.Addrs(), Cluster: true, OnEvictionCheck: func(ec EvictionCheck) {
			mu.Lock()
			defer mu.Unlock()
			if ec.Err == nil && !ec.Evicts() {
				got = append(got, ec.Addr)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		slices.Sort(got)
		want := cl.Addrs()
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("checked %q, want every master %q", got, want)
		}
	})
}

// TestClaimReportsRedisClock: ClaimResult.Now is the Redis server's clock
// at the script, the clock lease_until is set from.
func TestClaimReportsRedisClock(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		before := redisNow(t, e.s).Truncate(time.Millisecond)
		res := storetest.MustClaim(t, e.s, storetest.ClaimReq(storetest.NewID(t), "tok"))
		after := redisNow(t, e.s)
		if res.Now.Before(before) || res.Now.After(after) {
			t.Fatalf("Now = %v, want within [%v, %v]", res.Now, before, after)
		}
		if want := res.Now.Add(30 * time.Second); !res.Record.LeaseUntil.Equal(want) {
			t.Fatalf("LeaseUntil = %v, want Now+lease = %v", res.Record.LeaseUntil, want)
		}
	})
}

// TestLeaseExpiryFollowsRedisClock moves miniredis's clock, never
// this process's: a claim's lease runs out exactly when the Redis clock
// passes lease_until, whatever the caller's clock says, and Now tells the
// caller which clock decided. Two gateways whose clocks are an hour apart
// therefore reach the same decision.
func TestLeaseExpiryFollowsRedisClock(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			e := openMiniredisEnv(t)
			base := time.Now().Add(skew).Truncate(time.Millisecond)
			e.mini.SetTime(base) // Redis is an hour off this process
			id := storetest.NewID(t)
			req := storetest.ClaimReq(id, "tok")
			req.Lease = 10 * time.Second
			first := storetest.MustClaim(t, e.s, req)
			if !first.Claimed || !first.Now.Equal(base) || !first.Record.LeaseUntil.Equal(base.Add(10*time.Second)) {
				t.Fatalf("claim: %+v now %v, want lease until %v", first.Record, first.Now, base.Add(10*time.Second))
			}

			e.mini.SetTime(base.Add(10*time.Second - time.Millisecond))
			live := storetest.MustClaim(t, e.s, storetest.ClaimReq(id, "other"))
			if live.Claimed || live.Record.State != store.StateInFlight || !live.Record.LeaseUntil.After(live.Now) {
				t.Fatalf("1ms before lease_until by the Redis clock: %+v (now %v), want still in flight", live.Record, live.Now)
			}

			e.mini.SetTime(base.Add(10 * time.Second))
			expired := storetest.MustClaim(t, e.s, storetest.ClaimReq(id, "other"))
			if expired.Claimed || expired.Record.State != store.StateUnknown || expired.Record.Reason != "lease_expired" {
				t.Fatalf("at lease_until by the Redis clock: %+v, want outcome unknown (lease_expired)", expired.Record)
			}
			if expired.Record.LeaseUntil.After(expired.Now) {
				t.Fatalf("LeaseUntil %v after Now %v although the script found it expired", expired.Record.LeaseUntil, expired.Now)
			}
		})
	}
}

// BenchmarkClaimCompleteReplicated is the execute path (claim a new key,
// store a 1 KiB result) against a master with one replica on loopback,
// without and with WaitReplicas 1: the cost of waiting for the replica's
// acknowledgement after each of the two writes. short-writes counts the
// WAITs of the run that timed out (default wait timeout, 100ms): a loaded
// machine may keep an acknowledgement past it now and then.
func BenchmarkClaimCompleteReplicated(b *testing.B) {
	master := redistest.Start(b)
	redistest.StartReplica(b, master)
	res := benchResult(1024)
	for _, wait := range []int{0, 1} {
		b.Run("wait_replicas="+strconv.Itoa(wait), func(b *testing.B) {
			var shortN atomic.Int64
			s, err := Open(Options{Addrs: []string{master.Addr}, WaitReplicas: wait, OnWaitShort: func(WaitShortfall) { shortN.Add(1) }})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			ctx := context.Background()
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				shortN.Store(0)
				for b.Loop() {
					claimComplete(b, ctx, s, res)
				}
				b.ReportMetric(float64(shortN.Load()), "short-writes")
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				shortN.Store(0)
				b.SetParallelism(benchParallelism)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						claimComplete(b, ctx, s, res)
					}
				})
				b.ReportMetric(float64(shortN.Load()), "short-writes")
			})
		})
	}
}

// TestReplayWithoutReplicas: a replay (a completed or held record) keeps
// serving when the master refuses writes for want of replicas
// (min-replicas-to-write): its attempt counter is best-effort. With
// WaitReplicas it sends no WAIT, so it does not wait out WaitTimeout.
func TestReplayWithoutReplicas(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{master.Addr}, WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	done, held := storetest.NewID(t), storetest.NewID(t)
	for _, id := range []string{done, held} {
		storetest.MustClaim(t, s, storetest.ClaimReq(id, "tok"))
	}
	ok, err := s.Complete(ctx, storetest.Completion(done, "tok", storetest.SampleResult(), time.Hour))
	storetest.MustOK(t, "Complete", ok, err)
	ok, err = s.MarkUnknown(ctx, held, "tok", "upstream_timeout", time.Hour)
	storetest.MustOK(t, "MarkUnknown", ok, err)

	admin := master.Client(t)
	if err := admin.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	sent := &redistest.CommandLog{}
	s.Client().AddHook(sent)
	for _, tc := range []struct {
		id    string
		state store.State
	}{{done, store.StateCompleted}, {held, store.StateUnknown}} {
		sent.Take()
		res, err := s.Claim(ctx, storetest.ClaimReq(tc.id, "tok2"))
		if err != nil || res.Claimed || res.Record.State != tc.state {
			t.Fatalf("replay of a %s record on a master without its replicas: %+v, %v", tc.state, res, err)
		}
		if got := sent.Take(); slices.Contains(got, "wait") || slices.Contains(got, "pipeline:wait") {
			t.Errorf("replay of a %s record sent %q: a replay never waits", tc.state, got)
		}
	}
	// A new claim is refused by Redis itself (NOREPLICAS): the caller
	// answers 503, as for any store error.
	if _, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err == nil || !strings.Contains(err.Error(), "NOREPLICAS") {
		t.Fatalf("new claim under min-replicas-to-write without replicas: %v, want NOREPLICAS", err)
	}
}
