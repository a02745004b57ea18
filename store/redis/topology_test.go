package redis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
	goredis "github.com/redis/go-redis/v9"
)

// openCluster starts a three-master Cluster and opens a store on it,
// closed in t.Cleanup.
func openCluster(t testing.TB) (*redistest.Cluster, *Store) {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	s, err := Open(Options{Addrs: cl.Addrs(), Cluster: true})
	if err != nil {
		t.Fatalf("Open cluster: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return cl, s
}

// TestCluster runs the record life cycle on a three-master Redis Cluster:
// every script touches one key (no CROSSSLOT), the scripts are preloaded on
// every master (one EVALSHA per call), and ScanIDs walks all masters.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl, s := openCluster(t)
	ctx := context.Background()
	sent := &redistest.CommandLog{}
	s.Client().AddHook(sent)

	var ids []string
	for range 30 {
		id := storetest.NewID(t)
		ids = append(ids, id)
		sent.Take()
		if c := storetest.MustClaim(t, s, storetest.ClaimReq(id, "tok")); !c.Claimed {
			t.Fatalf("claim %s: %+v", id, c)
		}
		ok, err := s.Complete(ctx, storetest.Completion(id, "tok", storetest.SampleResult(), time.Hour))
		storetest.MustOK(t, "Complete", ok, err)
		if r := storetest.MustClaim(t, s, storetest.ClaimReq(id, "tok2")).Record; r.State != store.StateCompleted || r.Status != 201 {
			t.Fatalf("replay %s: %+v", id, r)
		}
		if got := sent.Take(); !slices.Equal(got, []string{"evalsha", "evalsha", "evalsha"}) {
			t.Fatalf("claim+complete+replay sent %q, want three EVALSHA", got)
		}
	}

	perNode := make([]int64, len(cl.Nodes))
	for i, n := range cl.Nodes {
		var err error
		if perNode[i], err = n.Client(t).DBSize(ctx).Result(); err != nil {
			t.Fatal(err)
		}
	}
	if slices.Contains(perNode, 0) {
		t.Fatalf("records per node %v: every master should hold some", perNode)
	}

	var seen []string
	if err := s.ScanIDs(ctx, func(id string) error { seen = append(seen, id); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	slices.Sort(ids)
	if !slices.Equal(seen, ids) {
		t.Fatalf("ScanIDs over the cluster found %d ids, want %d", len(seen), len(ids))
	}
}

// TestClusterIndexAndOperators: on a three-master Cluster the indexes and
// the operator scripts work without CROSSSLOT errors, each operator call is
// one EVALSHA, and List reads the tags' indexes of every master and finds
// the completed records with SCAN (no KEYS).
func TestClusterIndexAndOperators(t *testing.T) {
	t.Parallel()
	_, s := openCluster(t)
	ctx := context.Background()
	sent := &redistest.CommandLog{}
	s.Client().AddHook(sent)

	fx := storetest.MakeRecords(t, s, 24) // 96 records, on every master
	for _, st := range store.IndexStates() {
		if got := storetest.ListAll(t, s, store.ListFilter{State: st, Limit: 5}); !slices.Equal(got, fx.ByState[st]) {
			t.Fatalf("%s: listed %d records, want %d", st, len(got), len(fx.ByState[st]))
		}
	}
	sent.Take()
	if got := storetest.ListAll(t, s, store.ListFilter{Route: "deals", Limit: 7}); !slices.Equal(got, fx.ByRoute["deals"]) {
		t.Fatalf("route deals: listed %d records, want %d", len(got), len(fx.ByRoute["deals"]))
	}
	for _, cmd := range sent.Take() {
		if cmd != "time" && cmd != "pipeline:zrangebyscore" && cmd != "pipeline:getrange" && cmd != "scan" {
			t.Fatalf("List sent %s", cmd)
		}
	}

	for _, id := range fx.ByState[store.StateUnknown] {
		sent.Take()
		if _, err := s.OperatorRelease(ctx, id, testAction, time.Hour); err != nil {
			t.Fatalf("OperatorRelease %s: %v", id, err)
		}
		if r, err := s.OperatorComplete(ctx, id, storetest.SampleResult(), testAction, time.Hour); err != nil || r.State != store.StateCompleted {
			t.Fatalf("OperatorComplete %s: %+v, %v", id, r, err)
		}
		if got := sent.Take(); !slices.Equal(got, []string{"evalsha", "evalsha"}) {
			t.Fatalf("operator release+complete sent %q, want two EVALSHA", got)
		}
	}
	want := append(slices.Clone(fx.ByState[store.StateCompleted]), fx.ByState[store.StateUnknown]...)
	slices.Sort(want)
	if got := storetest.ListAll(t, s, store.ListFilter{State: store.StateCompleted, Limit: 1000}); !slices.Equal(got, want) {
		t.Fatalf("completed after the operator: %d records, want %d", len(got), len(want))
	}
	if got := storetest.ListAll(t, s, store.ListFilter{State: store.StateUnknown}); len(got) != 0 {
		t.Fatalf("still listed as unknown: %q", got)
	}
}

// TestSentinel opens the store through a Sentinel (MasterName) and checks
// that the records land on the monitored master.
func TestSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "idem")
	s, err := Open(Options{Addrs: []string{sentinel.Addr}, MasterName: "idem"})
	if err != nil {
		t.Fatalf("Open via Sentinel: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	id := storetest.NewID(t)
	storetest.MustClaim(t, s, storetest.ClaimReq(id, "tok"))
	ok, err := s.Complete(ctx, storetest.Completion(id, "tok", storetest.SampleResult(), time.Hour))
	storetest.MustOK(t, "Complete", ok, err)
	if n, err := master.Client(t).Exists(ctx, s.Key(id)).Result(); err != nil || n != 1 {
		t.Fatalf("record not on the master: %d, %v", n, err)
	}
	if r := storetest.MustClaim(t, s, storetest.ClaimReq(id, "tok2")).Record; r.State != store.StateCompleted {
		t.Fatalf("replay via Sentinel: %+v", r)
	}
}

func TestClusterScanStopsOnError(t *testing.T) {
	t.Parallel()
	_, s := openCluster(t)
	for range 60 {
		storetest.MustClaim(t, s, storetest.ClaimReq(storetest.NewID(t), "tok"))
	}
	stop := errors.New("stop")
	calls := 0
	err := s.ScanIDs(context.Background(), func(string) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("ScanIDs: %v after %d calls, want stop after 1", err, calls)
	}
}

// TestClusterSpread: on a three-master Cluster the record keys of 10,000
// executes land on more than 1,000 slots, and no key takes more than 1% of
// the writes. The writes are counted by Redis itself: keyspace
// notifications from every master, one per write to a key.
func TestClusterSpread(t *testing.T) {
	t.Parallel()
	cl, s := openCluster(t)
	ctx := context.Background()

	var (
		mu     sync.Mutex
		writes = map[string]int{}
		total  int
	)
	for _, n := range cl.Nodes {
		c := n.Client(t)
		if err := c.ConfigSet(ctx, "notify-keyspace-events", "K$z").Err(); err != nil {
			t.Fatal(err)
		}
		sub := c.PSubscribe(ctx, "__keyspace@0__:*")
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		go func() {
			for m := range sub.Channel() {
				mu.Lock()
				writes[strings.TrimPrefix(m.Channel, "__keyspace@0__:")]++
				total++
				mu.Unlock()
			}
		}()
	}

	const executes, workers = 10000, 16
	ids := make(chan string, executes)
	for range executes {
		ids <- store.NewToken() // 32 hex characters, like keying.KeyID
	}
	close(ids)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for id := range ids {
				req := storetest.ClaimReq(id, store.NewToken())
				res, err := s.Claim(ctx, req)
				if err != nil || !res.Claimed {
					t.Errorf("claim: %+v, %v", res, err)
					return
				}
				done := store.CompleteRequest{Claim: req, StartedAt: res.Record.StartedAt, Result: storetest.SampleResult(), TTL: time.Hour}
				if ok, err := s.Complete(ctx, done); !ok || err != nil {
					t.Errorf("complete: %v, %v", ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Four writes an execute: the record's two SETs, the in-flight
	// index's ZADD and ZREM. Notifications arrive asynchronously.
	for try := 0; ; try++ {
		mu.Lock()
		n := total
		mu.Unlock()
		if n == 4*executes {
			break
		}
		if try > 200 {
			t.Fatalf("%d keyspace notifications, want %d", n, 4*executes)
		}
		time.Sleep(50 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	cc := cl.Client(t)
	pipe := cc.Pipeline()
	var slots []*goredis.IntCmd
	busiest, most := "", 0
	for key, n := range writes {
		if n > most {
			busiest, most = key, n
		}
		if _, ok := s.idFromKey(key); ok {
			slots = append(slots, pipe.ClusterKeySlot(ctx, key))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	distinct := map[int64]bool{}
	for _, c := range slots {
		distinct[c.Val()] = true
	}
	share := float64(most) / float64(total)
	t.Logf("%d writes to %d keys; record keys on %d slots; the busiest key %s took %d writes (%.3f%%)",
		total, len(writes), len(distinct), busiest, most, 100*share)
	if len(slots) != executes || len(distinct) <= 1000 {
		t.Errorf("%d record keys on %d slots, want %d keys on more than 1000", len(slots), len(distinct), executes)
	}
	if share > 0.01 {
		t.Errorf("key %s took %.2f%% of the writes, want at most 1%%", busiest, 100*share)
	}
}
