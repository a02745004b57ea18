package local

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestJournalWriteFailureStopsTheStore: when the journal cannot be
// written, the call that waited for it fails, so does every later one
// (nothing is acknowledged that may not be on disk), and OnError hears of
// it once.
func TestJournalWriteFailureStopsTheStore(t *testing.T) {
	var mu sync.Mutex
	var reported []error
	e, err := Open(Options{Dir: t.TempDir(), OnError: func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	req := store.ClaimRequest{ID: "a1", Token: "t", Lease: time.Minute}
	if _, err := e.Claim(ctx, req); err != nil {
		t.Fatal(err)
	}
	_ = e.jf.Close() // the disk goes away under the engine
	req.ID = "b2"
	if _, err := e.Claim(ctx, req); err == nil || !strings.Contains(err.Error(), "journal write failed") {
		t.Fatalf("a claim whose journal write failed: %v", err)
	}
	if _, err := e.Get(ctx, "a1"); err == nil || !strings.Contains(err.Error(), e.Dir()) {
		t.Fatalf("a later call: %v, want the failure naming DIR", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "stopped until restart") {
		t.Fatalf("reported %v", reported)
	}
}
