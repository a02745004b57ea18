package embedded

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestGroupCommitWhileLogsRotate runs concurrent claims and completions
// while small memtables make Pebble close a log file every few hundred
// writes and the background sync runs all the time: the syncs that are
// not a durable write's (Close's, syncAll's) start while a durable
// write's waiter yields (walSync). Every call must return, and every
// completion must be found after a reopen.
func TestGroupCommitWhileLogsRotate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir, MemTableSize: 256 << 10, CacheSize: 1 << 20, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.wal.syncAll(); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	const workers, each = 32, 40
	body := strings.Repeat("x", 2000)
	req := func(w, i int) store.ClaimRequest {
		return store.ClaimRequest{
			ID: fmt.Sprintf("k-%02d-%03d", w, i), Route: "deals", Operation: "create_deal", Fingerprint: "fp",
			FingerprintRule: "whole-body", Token: "t", Lease: time.Minute, HoldTTL: time.Hour,
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					r := req(w, i)
					if res, err := e.Claim(t.Context(), r); err != nil || !res.Claimed {
						t.Errorf("claim %s: %v, %v", r.ID, res.Claimed, err)
						return
					}
					ok, err := e.Complete(t.Context(), store.CompleteRequest{Claim: r, Result: store.Result{Status: 201, Body: []byte(body)}, TTL: time.Hour})
					if err != nil || !ok {
						t.Errorf("complete %s: %v, %v", r.ID, ok, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the writes did not return")
	}
	close(stop)
	bg.Wait()
	durables, fsyncs := e.wal.durables.Load(), e.wal.fsyncs.Load()
	if durables < workers*each {
		t.Errorf("%d durable writes counted, want at least %d", durables, workers*each)
	}
	if n := e.db.Metrics().Flush.Count; n < 3 {
		t.Errorf("%d memtables flushed, want the logs to rotate at least 3 times", n)
	}
	t.Logf("%d durable writes, %d fsyncs, %d memtables flushed", durables, fsyncs, e.db.Metrics().Flush.Count)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	e, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for w := range workers {
		for i := range each {
			r := req(w, i)
			r.Token = "again"
			res, err := e.Claim(t.Context(), r)
			if err != nil || res.Claimed || res.Record.State != store.StateCompleted {
				t.Fatalf("%s after the reopen: claimed %v, %v, %v", r.ID, res.Claimed, res.Record.State, err)
			}
		}
	}
}
