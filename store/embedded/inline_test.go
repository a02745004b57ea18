package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/tmpfs"
	"github.com/idemgate/idemgate/store"
)

// TestInlineCommitsOnlyWithRoom: writes are committed in their callers
// while the disk has room to spare; once another file takes the room,
// the next look turns that off, so the claims that then meet a full disk
// are committed by goroutines of their own and fail closed within
// OpTimeout; once the room is back, writes go on and are committed in
// their callers again.
func TestInlineCommitsOnlyWithRoom(t *testing.T) {
	const room = 8 << 20 // in place of inlineRoom, on a file system of 24 MiB
	mnt := tmpfs.Mount(t, "24m")
	const opTimeout = 300 * time.Millisecond
	e, err := Open(Options{
		Dir: filepath.Join(mnt, "store"), MemTableSize: 256 << 10, CacheSize: 1 << 20,
		MinFreeSpace: 1 << 20, OpTimeout: opTimeout, SyncInterval: 20 * time.Millisecond,
		room: room,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	n := 0
	step := func() error {
		n++
		req := store.ClaimRequest{ID: fmt.Sprintf("k%05d", n), Token: "t", Lease: time.Minute, HoldTTL: time.Hour}
		if _, err := e.Claim(ctx, req); err != nil {
			return err
		}
		_, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: store.Result{Status: 201, Body: []byte("{}")}, TTL: time.Hour})
		return err
	}
	waitGate := func(want bool) {
		t.Helper()
		for i := 0; e.inline() != want; i++ {
			if i == 200 {
				t.Fatalf("commits in the caller %v after 2s, want %v", e.inline(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitGate(true)
	for range 100 {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}

	// Another file takes 16 MiB, leaving less than the room: the gate
	// closes at the next look.
	big := filepath.Join(mnt, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for range 16 {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	_ = f.Close()
	waitGate(false)
	filler := fill(t, mnt)
	var full error
	for i := 0; i < 5000 && full == nil; i++ {
		began := time.Now()
		full = step()
		if took := time.Since(began); took > 2*opTimeout+time.Second {
			t.Fatalf("a write on a filling disk took %s (OpTimeout %s)", took, opTimeout)
		}
	}
	if !errors.Is(full, ErrDiskFull) {
		t.Fatalf("on a full disk: %v, want ErrDiskFull", full)
	}
	for _, p := range []string{filler, big} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	waitGate(true)
	var again error
	for i := 0; i < 100; i++ { // up to 10s for the engine to see the room
		if again = step(); again == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if again != nil {
		t.Fatalf("the store does not write again once space returned: %v", again)
	}
}
