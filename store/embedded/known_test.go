package embedded

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// knownClaim is a claim of id; a second claim (another token) finds the
// first one's record.
func knownClaim(id string) store.ClaimRequest {
	return store.ClaimRequest{ID: id, Route: "r", Operation: "op", Fingerprint: "fp", FingerprintRule: "whole-body",
		Token: "t-" + id, Lease: 30 * time.Second, HoldTTL: time.Hour}
}

func secondClaim(id string) store.ClaimRequest {
	r := knownClaim(id)
	r.Token = "second-" + id
	return r
}

// waitKnown waits for the key filter's first build after Open.
func waitKnown(t testing.TB, e *Engine) {
	t.Helper()
	for range 500 {
		if e.known.builds.Load() > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the key filter was not built within 5s of Open")
}

// A filter never forgets an id it was given, however far past its size,
// and takes few ids it was not given for known while within it.
func TestKeyFilter(t *testing.T) {
	seed := maphash.MakeSeed()
	h := func(p string, i int) uint64 { return maphash.String(seed, fmt.Sprintf("%s-%07d", p, i)) }
	for _, tc := range []struct {
		name     string
		size     int64
		adds     int
		maxFalse float64 // of ids never added, the share taken for known
	}{
		{"within its size", 1 << 16, 1 << 16, 0.02},
		{"four times its size", 1 << 16, 4 << 16, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newKeyFilter(tc.size)
			for i := range tc.adds {
				f.add(h("in", i))
			}
			for i := range tc.adds {
				if !f.has(h("in", i)) {
					t.Fatalf("id %d was added and is not known", i)
				}
			}
			const probes = 20000
			wrong := 0
			for i := range probes {
				if f.has(h("out", i)) {
					wrong++
				}
			}
			if share := float64(wrong) / probes; share > tc.maxFalse {
				t.Fatalf("%d of %d ids never added are taken for known (%.3f > %.3f)", wrong, probes, share, tc.maxFalse)
			}
			t.Logf("%d ids in a filter of %d bits: %d/%d false maybes", tc.adds, len(f.bits)*64, wrong, probes)
		})
	}
}

// A claim of a key DIR does not hold reads nothing once the filter is
// built: no table's filter or block is looked at. (Before the filter, each
// such claim read the filter block of every table.)
func TestNewKeyClaimReadsNoTable(t *testing.T) {
	ctx := context.Background()
	e, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i := range 500 {
		if _, err := e.Claim(ctx, knownClaim(fmt.Sprintf("old-%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}
	waitKnown(t, e)
	reads := func() int64 {
		m := e.db.Metrics()
		return m.BlockCache.Hits + m.BlockCache.Misses
	}
	before := reads()
	for i := range 200 {
		res, err := e.Claim(ctx, knownClaim(fmt.Sprintf("new-%04d", i)))
		if err != nil || !res.Claimed {
			t.Fatalf("claim of new-%04d: %+v, %v", i, res, err)
		}
	}
	if n := reads() - before; n != 0 {
		t.Fatalf("200 claims of new keys read the block cache %d times, want 0", n)
	}
	// A key in a table is still found.
	if res, err := e.Claim(ctx, secondClaim("old-0007")); err != nil || res.Claimed || res.Record == nil {
		t.Fatalf("a claim of a key held in a table: %+v, %v", res, err)
	}
}

// Rebuilds while claims create keys, and an Open's build, lose no key: a
// second claim of every key finds its record.
func TestKnownKeysRebuildUnderWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	waitKnown(t, e)
	const writers, per = 4, 1500
	id := func(w, i int) string { return fmt.Sprintf("w%d-%05d", w, i) }
	var wg sync.WaitGroup
	stop := make(chan struct{})
	builds := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.buildKnown(); err != nil {
				t.Errorf("build: %v", err)
				return
			}
			builds++
		}
	}()
	var claims sync.WaitGroup
	for w := range writers {
		claims.Add(1)
		go func() {
			defer claims.Done()
			for i := range per {
				if res, err := e.Claim(ctx, knownClaim(id(w, i))); err != nil || !res.Claimed {
					t.Errorf("claim %s: %+v, %v", id(w, i), res, err)
					return
				}
			}
		}()
	}
	claims.Wait()
	close(stop)
	wg.Wait()
	if builds < 2 {
		t.Fatalf("only %d rebuilds ran during the writes", builds)
	}
	check := func(e *Engine, where string) {
		for w := range writers {
			for i := range per {
				if !e.known.may(id(w, i)) {
					t.Fatalf("%s: %s was written and the filter says DIR does not hold it", where, id(w, i))
				}
			}
		}
		for w := range writers {
			for i := 0; i < per; i += 97 {
				res, err := e.Claim(ctx, secondClaim(id(w, i)))
				if err != nil || res.Claimed {
					t.Fatalf("%s: a second claim of %s: %+v, %v", where, id(w, i), res, err)
				}
			}
		}
	}
	check(e, fmt.Sprintf("after %d rebuilds", builds))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	waitKnown(t, e)
	check(e, "after a reopen")
}

// A build waits for a write under way whose id reached only the filter
// in use: it scans the key once the write has committed.
func TestKnownBuildWaitsForWritesUnderWay(t *testing.T) {
	ctx := context.Background()
	e, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	waitKnown(t, e)
	const id = "under-way"
	// A write as updateSlot makes it: the record's lock, the add, then
	// the commit.
	held, err := e.locks.take(ctx, id, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.known.add(id)
	built := make(chan error, 1)
	go func() { built <- e.buildKnown() }()
	select {
	case err := <-built:
		t.Fatalf("the build ended (%v) while a write it must scan was under way", err)
	case <-time.After(200 * time.Millisecond):
	}
	b := e.db.NewBatch()
	if err := putRecord(b, nil, &rec{Record: store.Record{ID: id, State: store.StateInFlight}, ExpireAt: e.now() + 60_000}, tomb{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	<-held
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	if !e.known.may(id) {
		t.Fatal("the rebuilt filter says DIR does not hold a key written during the build")
	}
}

// The filter asks to be built again once it holds more ids than its
// build set (twice what it found, at least knownMinKeys), not before.
func TestKnownKeysFull(t *testing.T) {
	var k knownKeys
	k.init(maphash.MakeSeed())
	if k.full() {
		t.Fatal("full before the first build")
	}
	const keys = 1000
	f := newKeyFilter(keys)
	f.keys = keys
	k.cur.Store(f)
	for i := range keys {
		k.add(fmt.Sprintf("k%d", i))
	}
	if k.full() {
		t.Fatalf("full at %d keys", keys)
	}
	k.add("one more")
	if !k.full() {
		t.Fatalf("not full at %d keys", keys+1)
	}
}

// loadRecord writes r into b as a test's or benchmark's load, bypassing
// the calls: the key filter hears of it first, as of an engine's write.
// A load that is not under the records' locks ends with a build
// (loaded), which scans what it wrote.
func loadRecord(e *Engine, b *pebble.Batch, r *rec, t tomb) error {
	e.known.add(r.ID)
	return putRecord(b, nil, r, t)
}

// loaded builds the key filter anew once a load's batches are committed.
func loaded(t testing.TB, e *Engine) {
	t.Helper()
	if err := e.buildKnown(); err != nil {
		t.Fatal(err)
	}
}
