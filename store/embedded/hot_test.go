package embedded

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// hotCount is how many records the engine keeps in memory, and their
// counted bytes. Only a test holding no record's lock may call it with
// calls running: it takes every stripe's lock.
func hotCount(t *testing.T, e *Engine) (n int, bytes int64) {
	t.Helper()
	for i := range e.hot.stripe {
		ch := e.locks.stripes[i]
		ch <- struct{}{}
		n += len(e.hot.stripe[i])
		<-ch
	}
	return n, e.hot.bytes.Load()
}

// parallel runs f(0..n-1) from 64 goroutines (their synced writes share
// fsyncs) and fails t with the first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Go(func() {
			for i := g; i < n; i += 64 {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

func hotClaim(id string, request []byte) store.ClaimRequest {
	return store.ClaimRequest{ID: id, Route: "r", Operation: "op", Fingerprint: "fp", Token: "tok-" + id,
		Lease: time.Minute, HoldTTL: time.Hour, Request: request}
}

// TestHotBounded: records claimed and never settled (their calls never
// come) are kept in memory up to the bounds, whatever their number and
// size, and a completion, release or hold drops its record.
func TestHotBounded(t *testing.T) {
	e, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	const claims = hotMaxBytes/512 + lockStripes // more than the byte bound keeps (512 counted per record at least)
	parallel(t, claims, func(i int) error {
		if r, err := e.Claim(ctx, hotClaim(fmt.Sprintf("k%031x", i), nil)); err != nil || !r.Claimed {
			return fmt.Errorf("claim %d: %+v, %v", i, r, err)
		}
		return nil
	})
	n, bytes := hotCount(t, e)
	t.Logf("%d claims in flight: %d kept in memory, %d bytes counted", claims, n, bytes)
	if n == 0 || n > hotPerStripe*lockStripes || bytes > hotMaxBytes {
		t.Fatalf("%d records kept (%d bytes), want 1..%d and at most %d bytes", n, bytes, hotPerStripe*lockStripes, hotMaxBytes)
	}
	parallel(t, claims, func(i int) error {
		req := hotClaim(fmt.Sprintf("k%031x", i), nil)
		var ok bool
		var err error
		switch i % 3 {
		case 0:
			ok, err = e.Complete(ctx, store.CompleteRequest{Claim: req, Result: store.Result{Status: 201, Body: []byte("done")}, TTL: time.Hour})
		case 1:
			ok, err = e.Release(ctx, req.ID, req.Token, time.Hour)
		default:
			ok, err = e.MarkUnknown(ctx, req.ID, req.Token, "test", time.Hour)
		}
		if err != nil || !ok {
			return fmt.Errorf("settle %d: %v, %v", i, ok, err)
		}
		return nil
	})
	if n, bytes := hotCount(t, e); n != 0 || bytes != 0 {
		t.Fatalf("after every record was settled: %d kept, %d bytes", n, bytes)
	}

	// Large sealed requests: the byte bound holds.
	big := []byte(strings.Repeat("x", 1<<20))
	for i := range 3 * hotMaxBytes / len(big) {
		if r, err := e.Claim(ctx, hotClaim(fmt.Sprintf("b%031x", i), big)); err != nil || !r.Claimed {
			t.Fatal(r, err)
		}
	}
	n, bytes = hotCount(t, e)
	t.Logf("large requests: %d kept in memory, %d bytes counted", n, bytes)
	if n == 0 || bytes > hotMaxBytes {
		t.Fatalf("%d records of 1 MiB kept (%d bytes), want at least one and at most %d bytes", n, bytes, hotMaxBytes)
	}
}

// TestHotFollowsDisk: what a call reads from memory is what the disk
// holds: a replay's attempt count written while the record is in
// flight, then its completion, read back from Pebble alone; and a record
// whose lease and hold ran out leaves memory with the sweep.
func TestHotFollowsDisk(t *testing.T) {
	e, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	req := hotClaim("hot-1", []byte("sealed"))
	if r, err := e.Claim(ctx, req); err != nil || !r.Claimed {
		t.Fatal(r, err)
	}
	if n, _ := hotCount(t, e); n != 1 {
		t.Fatalf("after a claim: %d kept, want 1", n)
	}
	other := req
	other.Token = "tok-other"
	if r, err := e.Claim(ctx, other); err != nil || r.Claimed || r.Record.Attempts != 2 {
		t.Fatalf("a second claim while in flight: %+v, %v; want not claimed, attempts 2", r, err)
	}
	if ok, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: store.Result{Status: 201, Body: []byte("done")}, TTL: time.Hour}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if n, _ := hotCount(t, e); n != 0 {
		t.Fatalf("after the completion: %d kept, want 0", n)
	}
	s, err := e.readSlot("hot-1")
	if err != nil || s.rec == nil {
		t.Fatal(s, err)
	}
	if r := s.rec; r.State != store.StateCompleted || r.Attempts != 2 || string(r.Body) != "done" || r.Token != req.Token || len(r.Request) != 0 {
		t.Fatalf("on disk: state %s, attempts %d, body %q, token %s, request %q", r.State, r.Attempts, r.Body, r.Token, r.Request)
	}

	short := hotClaim("hot-2", nil)
	short.HoldTTL = time.Millisecond
	short.Lease = time.Millisecond
	if r, err := e.Claim(ctx, short); err != nil || !r.Claimed {
		t.Fatal(r, err)
	}
	time.Sleep(5 * time.Millisecond)
	if _, err := e.sweep(); err != nil {
		t.Fatal(err)
	}
	if n, _ := hotCount(t, e); n != 0 {
		t.Fatalf("after the sweep expired the record: %d kept, want 0", n)
	}
	if s, err := e.readSlot("hot-2"); err != nil || s.rec != nil {
		t.Fatalf("after the sweep: %+v, %v; want no record", s, err)
	}
}
