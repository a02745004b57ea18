package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestBatchedCalls: concurrent claims leave together, as pipelines, and
// every one of them gets its own answer; Redis runs each script once.
func TestBatchedCalls(t *testing.T) {
	t.Parallel()
	e := openRedis(t)
	admin := e.srv.Client(t)
	sent := &redistest.CommandLog{}
	e.s.Client().AddHook(sent)
	ctx := context.Background()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 64
	ids := make([]string, n)
	for i := range ids {
		ids[i] = storetest.NewID(t)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]store.ClaimResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.s.Claim(ctx, storetest.ClaimReq(ids[i], "tok"))
		})
	}
	// Redis holds the first call a moment, as a busy server would, so the
	// others queue behind it whatever the scheduler does with the
	// goroutines on a loaded machine.
	if err := admin.ClientPause(ctx, 100*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	close(start)
	wg.Wait()
	cmds := sent.Take()
	for i := range n {
		if errs[i] != nil || !results[i].Claimed || results[i].Record.ID != ids[i] {
			t.Fatalf("claim %d: %+v, %v", i, results[i], errs[i])
		}
		if r := storetest.MustGet(t, e.s, ids[i]); r.State != store.StateInFlight || r.Token != "tok" {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	alone, batched := 0, 0
	for _, c := range cmds {
		switch c {
		case "evalsha":
			alone++
		case "pipeline:evalsha":
			batched++
		case "hello", "config": // a new connection's handshake and eviction policy check
		default:
			t.Fatalf("client sent %s", c)
		}
	}
	t.Logf("%d calls sent alone, %d in pipelines", alone, batched)
	if alone+batched != n || batched == 0 {
		t.Errorf("%d alone and %d batched of %d calls, want some batched", alone, batched, n)
	}
	if stats := redistest.CommandStats(t, admin); stats["evalsha"] != n {
		t.Errorf("Redis ran %d EVALSHA, want %d", stats["evalsha"], n)
	}
}

// TestBatchSkipsAbandonedCalls: a call whose caller gave up while it
// waited for a lane returns the caller's error and is never sent.
func TestBatchSkipsAbandonedCalls(t *testing.T) {
	t.Parallel()
	e := openRedis(t)
	sent := &redistest.CommandLog{}
	e.s.Client().AddHook(sent)
	b := e.s.batch
	b.mu.Lock()
	b.busy = b.lanes // every lane taken
	b.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	id := storetest.NewID(t)
	stored := (&blob{state: stInFlight, attempts: 1, executions: 1, claim: claimPart(storetest.ClaimReq(id, "tok"))}).encode()
	cmd := b.do(ctx, claimScript, e.s.keys(id), []any{id, "tok", stored, 0, "1000", "hold", "1000"})
	if !errors.Is(cmd.Err(), context.Canceled) {
		t.Fatalf("abandoned call: %v, want context.Canceled", cmd.Err())
	}
	b.drain() // on one of the lanes taken above, which it gives back
	if got := sent.Take(); len(got) != 0 {
		t.Fatalf("client sent %q for an abandoned call", got)
	}
	if r, err := e.s.Get(context.Background(), id); r != nil || err != nil {
		t.Fatalf("abandoned claim ran: %+v, %v", r, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.busy != b.lanes-1 || len(b.pending) != 0 {
		t.Fatalf("lanes busy %d of %d, %d pending after the drain", b.busy, b.lanes, len(b.pending))
	}
	b.busy = 0
}
