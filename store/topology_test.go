package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestCluster runs the record life cycle on a three-master Redis Cluster:
// every script touches one key (no CROSSSLOT), the scripts are preloaded on
// every master (one EVALSHA per call), and ScanIDs walks all masters.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, err := Open(Options{Addrs: cl.Addrs(), Cluster: true})
	if err != nil {
		t.Fatalf("Open cluster: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	sent := &redistest.CommandLog{}
	s.Client().AddHook(sent)

	var ids []string
	for range 30 {
		id := newID(t)
		ids = append(ids, id)
		sent.Take()
		if c := mustClaim(t, s, claimReq(id, "tok")); !c.Claimed {
			t.Fatalf("claim %s: %+v", id, c)
		}
		ok, err := s.Complete(ctx, completion(id, "tok", sampleResult(), time.Hour))
		mustOK(t, "Complete", ok, err)
		if r := mustClaim(t, s, claimReq(id, "tok2")).Record; r.State != StateCompleted || r.Status != 201 {
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
// one EVALSHA, and List walks the shards of every master from the indexes
// alone (no SCAN, no KEYS).
func TestClusterIndexAndOperators(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, err := Open(Options{Addrs: cl.Addrs(), Cluster: true})
	if err != nil {
		t.Fatalf("Open cluster: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	sent := &redistest.CommandLog{}
	s.Client().AddHook(sent)

	fx := makeRecords(t, s, 24) // 96 records, on every master
	for _, st := range indexStates {
		if got := listAll(t, s, ListFilter{State: st, Limit: 5}); !slices.Equal(got, fx.byState[st]) {
			t.Fatalf("%s: listed %d records, want %d", st, len(got), len(fx.byState[st]))
		}
	}
	sent.Take()
	if got := listAll(t, s, ListFilter{Route: "deals", Limit: 7}); !slices.Equal(got, fx.byRoute["deals"]) {
		t.Fatalf("route deals: listed %d records, want %d", len(got), len(fx.byRoute["deals"]))
	}
	for _, cmd := range sent.Take() {
		if cmd != "time" && cmd != "pipeline:zrangebyscore" && cmd != "pipeline:getrange" && cmd != "scan" {
			t.Fatalf("List sent %s", cmd)
		}
	}

	for _, id := range fx.byState[StateUnknown] {
		sent.Take()
		if _, err := s.OperatorRelease(ctx, id, testAction, time.Hour); err != nil {
			t.Fatalf("OperatorRelease %s: %v", id, err)
		}
		if r, err := s.OperatorComplete(ctx, id, sampleResult(), testAction, time.Hour); err != nil || r.State != StateCompleted {
			t.Fatalf("OperatorComplete %s: %+v, %v", id, r, err)
		}
		if got := sent.Take(); !slices.Equal(got, []string{"evalsha", "evalsha"}) {
			t.Fatalf("operator release+complete sent %q, want two EVALSHA", got)
		}
	}
	want := append(slices.Clone(fx.byState[StateCompleted]), fx.byState[StateUnknown]...)
	slices.Sort(want)
	if got := listAll(t, s, ListFilter{State: StateCompleted, Limit: 1000}); !slices.Equal(got, want) {
		t.Fatalf("completed after the operator: %d records, want %d", len(got), len(want))
	}
	if got := listAll(t, s, ListFilter{State: StateUnknown}); len(got) != 0 {
		t.Fatalf("still listed as unknown: %q", got)
	}
}

// TestSentinel opens the store through a Sentinel (MasterName) and checks
// that the records land on the monitored master.
func TestSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "idem")
	s, err := Open(Options{Addrs: []string{sentinel.Addr}, MasterName: "idem"})
	if err != nil {
		t.Fatalf("Open via Sentinel: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	id := newID(t)
	mustClaim(t, s, claimReq(id, "tok"))
	ok, err := s.Complete(ctx, completion(id, "tok", sampleResult(), time.Hour))
	mustOK(t, "Complete", ok, err)
	if n, err := master.Client(t).Exists(ctx, s.Key(id)).Result(); err != nil || n != 1 {
		t.Fatalf("record not on the master: %d, %v", n, err)
	}
	if r := mustClaim(t, s, claimReq(id, "tok2")).Record; r.State != StateCompleted {
		t.Fatalf("replay via Sentinel: %+v", r)
	}
}

func TestClusterScanStopsOnError(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, err := Open(Options{Addrs: cl.Addrs(), Cluster: true})
	if err != nil {
		t.Fatalf("Open cluster: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for range 60 {
		mustClaim(t, s, claimReq(newID(t), "tok"))
	}
	stop := errors.New("stop")
	calls := 0
	err = s.ScanIDs(context.Background(), func(string) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("ScanIDs: %v after %d calls, want stop after 1", err, calls)
	}
}
