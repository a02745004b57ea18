package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/tmpfs"
	"github.com/idemgate/idemgate/store"
)

// fill writes a file in dir until the filesystem is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !strings.Contains(err.Error(), "no space") {
				t.Fatal(err)
			}
			return path
		}
	}
}

// TestDiskFullFailsClosedAndRecovers: on a 4 MiB tmpfs, with memtables
// small enough that flushes and compactions run throughout, the disk
// fills up: every claim then fails at once with ErrDiskFull (nothing
// would be forwarded), results are never acknowledged unless stored, and
// once space returns the same engine, without a reopen, claims and
// completes again; no key acknowledged before is executed again, and
// every key refused meanwhile executes once now.
func TestDiskFullFailsClosedAndRecovers(t *testing.T) {
	t.Parallel()
	mnt := tmpfs.Mount(t, "4m")
	var mu sync.Mutex
	var reports []string
	e, err := Open(Options{
		Dir: filepath.Join(mnt, "store"), MemTableSize: 256 << 10, CacheSize: 1 << 20,
		MinFreeSpace: 1 << 20, OpTimeout: 300 * time.Millisecond,
		OnError: func(err error) { mu.Lock(); reports = append(reports, err.Error()); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	body := []byte(strings.Repeat("r", 1000))
	acked := map[string]bool{}   // claim and result acknowledged
	refused := map[string]bool{} // claim refused: nothing forwarded
	inDoubt := map[string]bool{} // claimed (forwarded), its result refused
	step := func(key string) error {
		req := store.ClaimRequest{ID: key, Token: "t-" + key, Lease: time.Minute, HoldTTL: time.Hour}
		res, err := e.Claim(ctx, req)
		if err != nil {
			refused[key] = true
			return err
		}
		if !res.Claimed {
			return fmt.Errorf("%s: not claimed: %+v", key, res.Record)
		}
		ok, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: store.Result{Status: 201, Body: body}, TTL: time.Hour})
		if err != nil {
			inDoubt[key] = true
			return err
		}
		if !ok {
			return fmt.Errorf("%s: complete: not the claim's owner", key)
		}
		acked[key] = true
		return nil
	}
	// Records until a sizeable part of the disk holds them, then the rest
	// of it taken by another file.
	n := 0
	for ; n < 1500; n++ {
		if err := step(fmt.Sprintf("k%05d", n)); err != nil {
			t.Fatalf("before the disk filled: %v", err)
		}
	}
	filler := fill(t, mnt)
	var full error
	for i := 0; i < 5000 && full == nil; i++ {
		n++
		if err := step(fmt.Sprintf("k%05d", n)); err != nil {
			full = err
		}
	}
	if !errors.Is(full, ErrDiskFull) || !errors.Is(full, store.ErrNoRoom) {
		t.Fatalf("on a full disk: %v, want ErrDiskFull, a store.ErrNoRoom", full)
	}
	// While full: claims fail at once, replays still answer.
	for i := 0; i < 20; i++ {
		n++
		key := fmt.Sprintf("k%05d", n)
		if err := step(key); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("claim %s while the disk is full: %v, want ErrDiskFull", key, err)
		}
	}
	if r, err := e.Get(ctx, "k00001"); err != nil || r == nil || r.State != store.StateCompleted {
		t.Fatalf("a replay while the disk is full: %+v, %v", r, err)
	}
	t.Logf("disk full after %d keys (%d acknowledged, %d refused, %d results refused): %v", n, len(acked), len(refused), len(inDoubt), full)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var again error
	for i := 0; i < 100; i++ { // up to 10s for the engine to see the room
		if again = step(fmt.Sprintf("after-%03d", i)); again == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if again != nil {
		t.Fatalf("the store does not write again once space returned: %v", again)
	}
	for i := 0; i < 500; i++ {
		if err := step(fmt.Sprintf("later-%03d", i)); err != nil {
			t.Fatalf("after space returned: %v", err)
		}
	}
	executedTwice, executedNow := 0, 0
	for key := range acked {
		res, err := e.Claim(ctx, store.ClaimRequest{ID: key, Token: "retry", Lease: time.Minute})
		if err != nil {
			t.Fatalf("retry %s: %v", key, err)
		}
		if res.Claimed || res.Record.State != store.StateCompleted || len(res.Record.Body) != len(body) {
			executedTwice++
		}
	}
	for key := range inDoubt {
		// Forwarded, its result not stored: never executed again (in
		// flight until its lease runs out, then held or completed late).
		res, err := e.Claim(ctx, store.ClaimRequest{ID: key, Token: "retry", Lease: time.Minute})
		if err != nil || res.Claimed {
			t.Errorf("retry of %s, whose result was refused: %+v, %v", key, res.Record, err)
		}
	}
	for key := range refused {
		res, err := e.Claim(ctx, store.ClaimRequest{ID: key, Token: "retry", Lease: time.Minute})
		if err != nil {
			t.Fatalf("retry %s: %v", key, err)
		}
		if res.Claimed && res.Record.Executions == 1 {
			executedNow++
		} else {
			t.Errorf("refused key %s on retry: %+v", key, res.Record)
		}
	}
	m := e.db.Metrics()
	mu.Lock()
	t.Logf("after: %d acknowledged keys executed again; %d refused keys executed once now; flushes %d, compactions %d; reports %q",
		executedTwice, executedNow, m.Flush.Count, m.Compact.Count, reports)
	mu.Unlock()
	if executedTwice > 0 {
		t.Fatalf("%d acknowledged keys would execute again", executedTwice)
	}
	if m.Compact.Count == 0 {
		t.Fatalf("no compaction ran")
	}
}
