package embedded

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/idemgate/idemgate/store"
)

// cut stops e as a crash does: no flush, no clean marker, DIR given up.
// Its database is left to the file system the caller cloned.
func (e *Engine) cut() {
	_ = e.shut(func() error {
		_ = e.db.Close()
		_ = e.lock.unlock()
		return errClosed
	})
}

// crashKey is one key of TestCrashLosesOnlyUnsynced and what was done
// with it before the cut.
type crashKey struct {
	id, token, body string
	completed       bool // Complete returned
	synced          bool // and a sync of the log began after that
}

// TestCrashLosesOnlyUnsynced runs executes and replays on a file system
// that keeps only what was synced (a power cut) or everything written
// (kill -9), cuts, reopens and retries every key. Whatever the cut
// lost, no key executes twice and every forwarded claim is found; every
// completion written before the last sync of the log replays, and after
// kill -9 every completion does.
func TestCrashLosesOnlyUnsynced(t *testing.T) {
	t.Parallel()
	power := vfs.CrashCloneCfg{}
	kill := vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))}
	for _, tc := range []struct {
		name string
		cut  vfs.CrashCloneCfg
		// allCompleted: every completion replays, synced or not.
		allCompleted bool
		// claimsLast: the in-flight claims are the last writes (else
		// the recent completions are).
		claimsLast bool
	}{
		{name: "power cut after completions", cut: power},
		{name: "power cut after claims", cut: power, claimsLast: true},
		{name: "kill -9 after completions", cut: kill, allCompleted: true},
		{name: "power cut, some unsynced blocks written", cut: vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(3, 4))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			crashRun(t, tc.cut, tc.allCompleted, tc.claimsLast)
		})
	}
}

func crashRun(t *testing.T, cut vfs.CrashCloneCfg, allCompleted, claimsLast bool) {
	ctx := context.Background()
	dir := t.TempDir()
	mem := vfs.NewCrashableMem()
	// No background sync during the run: the test syncs the log itself
	// where the window would have passed.
	open := func(fs vfs.FS) *Engine {
		t.Helper()
		e, err := Open(Options{Dir: dir, SyncInterval: time.Hour, fs: fs})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return e
	}
	e := open(mem)
	claim := func(e *Engine, k *crashKey) store.ClaimResult {
		t.Helper()
		res, err := e.Claim(ctx, store.ClaimRequest{
			ID: k.id, Route: "deals", Operation: "create_deal", Fingerprint: "fp", FingerprintRule: "whole-body",
			Token: k.token, Lease: time.Minute, HoldTTL: time.Hour,
		})
		if err != nil {
			t.Fatalf("claim %s: %v", k.id, err)
		}
		return res
	}
	complete := func(k *crashKey) {
		t.Helper()
		ok, err := e.Complete(ctx, store.CompleteRequest{
			Claim:  store.ClaimRequest{ID: k.id, Route: "deals", Operation: "create_deal", Token: k.token},
			Result: store.Result{Status: 201, Body: []byte(k.body)},
			TTL:    time.Hour,
		})
		if err != nil || !ok {
			t.Fatalf("complete %s: %v, %v", k.id, ok, err)
		}
		k.completed = true
	}
	// run claims (when claims) and completes and replays once (when
	// completes) every key, on 8 goroutines (group commit).
	run := func(keys []*crashKey, claims, completes bool) {
		t.Helper()
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(keys); i += 8 {
					k := keys[i]
					if claims && !claim(e, k).Claimed {
						t.Errorf("%s: a new key is not claimed", k.id)
						return
					}
					if !completes {
						continue
					}
					complete(k)
					again := *k
					again.token = "retry"
					if res := claim(e, &again); res.Claimed || string(res.Record.Body) != k.body {
						t.Errorf("%s: the replay before the cut claimed %v, body %q", k.id, res.Claimed, res.Record.Body)
					}
				}
			}()
		}
		wg.Wait()
	}
	newKeys := func(kind string, n int) []*crashKey {
		keys := make([]*crashKey, n)
		for i := range keys {
			keys[i] = &crashKey{id: fmt.Sprintf("%s-%04d", kind, i), token: "t-" + kind, body: fmt.Sprintf(`{"id":"%s-%d"}`, kind, i)}
		}
		return keys
	}
	old, inFlight, recent := newKeys("old", 200), newKeys("inflight", 50), newKeys("recent", 200)
	run(old, true, true)
	// The sync window passes: what the background sync does.
	if err := e.wal.syncAll(); err != nil {
		t.Fatal(err)
	}
	for _, k := range old {
		k.synced = true
	}
	if !claimsLast {
		run(inFlight, true, false) // forwarded, the cut comes before their answers
	}
	run(recent, true, false)
	run(recent, false, true) // completed after the last synced write
	if claimsLast {
		run(inFlight, true, false) // and their sync covers the completions
	}
	if t.Failed() {
		return
	}

	crashed := mem.CrashClone(cut)
	e.cut()
	e = open(crashed)
	defer e.Close()

	lost := 0
	for _, keys := range [][]*crashKey{old, inFlight, recent} {
		for _, k := range keys {
			retry := *k
			retry.token = "after-the-cut"
			res := claim(e, &retry)
			switch {
			case res.Claimed:
				t.Errorf("%s was forwarded before the cut and would execute again", k.id)
			case res.Record.State == store.StateCompleted:
				if !k.completed || string(res.Record.Body) != k.body {
					t.Errorf("%s: replays %q, was completed %v with %q", k.id, res.Record.Body, k.completed, k.body)
				}
			case res.Record.State != store.StateInFlight || res.Record.Token != k.token:
				t.Errorf("%s: %s with token %q, want the claim (in flight, %q)", k.id, res.Record.State, res.Record.Token, k.token)
			case k.synced || k.completed && allCompleted:
				t.Errorf("%s: the completion is lost (found its claim), though it was on disk", k.id)
			case k.completed:
				lost++ // a completion of the last window: its claim is back
			}
		}
	}
	// The completions since the last sync that replay were written to a
	// log file Pebble closed (synced) when it moved to a new memtable.
	t.Logf("after the cut: %d old completions replay, %d forwarded claims are found in flight, "+
		"%d of %d completions since the last sync came back as their claims",
		len(old), len(inFlight), lost, len(recent))
}
