package embedded

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// rssMiB is this process's resident set size in MiB (VmRSS).
func rssMiB(b *testing.B) float64 {
	s, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkRSSMillionsOfRecords prints the resident memory of an engine
// holding 2,000,000 live records with 1 KB answers (IDEMGATE_RSS_RECORDS
// changes the count): loaded in batches, then 64 callers claiming and
// completing new keys and replaying random old ones through the
// contract. Memory is Pebble's bounded cache and memtables, not the
// records. Loaded bodies are random (incompressible). It writes about 2.5 GB to a temporary directory
// (IDEMGATE_RSS_DIR chooses where).
//
//	go test -run '^$' -bench RSSMillionsOfRecords -benchtime 1x ./store/embedded/
func BenchmarkRSSMillionsOfRecords(b *testing.B) {
	records := 2_000_000
	if v, err := strconv.Atoi(os.Getenv("IDEMGATE_RSS_RECORDS")); err == nil && v > 0 {
		records = v
	}
	dir := os.Getenv("IDEMGATE_RSS_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else {
		var err error
		if dir, err = os.MkdirTemp(dir, "rss-"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	e, err := Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	body := []byte(strings.Repeat("a", 1024))
	report := func(stage string) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		m := e.db.Metrics()
		fmt.Printf("%-34s RSS %6.1f MiB  Go heap %6.1f MiB  block cache %5.1f MiB  DIR tables %6.0f MiB\n",
			stage, rssMiB(b), float64(ms.HeapAlloc)/(1<<20), float64(m.BlockCache.Size)/(1<<20),
			float64(m.Total().TablesSize)/(1<<20))
	}
	report("open, empty")
	began := time.Now()
	now := e.now()
	batch := e.db.NewBatch()
	rnd := rand.NewChaCha8([32]byte{1})
	for i := range records {
		body := make([]byte, 1024) // incompressible, as most answers are after encoding
		_, _ = rnd.Read(body)
		r := &rec{Record: store.Record{
			ID: fmt.Sprintf("%032x", i), Route: "deals", Operation: "create_deal", Fingerprint: "fp",
			State: store.StateCompleted, Token: "tok", StartedAt: time.UnixMilli(now), CompletedAt: time.UnixMilli(now),
			Attempts: 1, Executions: 1, Result: store.Result{Status: 201, Body: body, Digest: "d"},
		}, ExpireAt: now + time.Hour.Milliseconds()}
		if err := loadRecord(e, batch, r, tomb{}); err != nil {
			b.Fatal(err)
		}
		if batch.Len() > 4<<20 {
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
		if (i+1)%500_000 == 0 {
			report(fmt.Sprintf("%d records loaded", i+1))
		}
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	loaded(b, e)
	for idle, deadline := 0, time.Now().Add(3*time.Minute); idle < 10 && time.Now().Before(deadline); {
		if e.db.Metrics().Compact.NumInProgress > 0 {
			idle = 0
		} else {
			idle++
		}
		time.Sleep(100 * time.Millisecond) // the load's compactions settle
	}
	fmt.Printf("loaded %d records in %s (compactions settled)\n", records, time.Since(began).Round(time.Second))
	report(fmt.Sprintf("%d records", records))

	// Traffic through the contract: new keys executed, old keys replayed.
	const callers, executes, replays = 64, 20_000, 200_000
	ctx := context.Background()
	var seq, failed atomic.Int64
	var wg sync.WaitGroup
	began = time.Now()
	for c := range callers {
		wg.Go(func() {
			for i := c; i < executes+replays; i += callers {
				if i%11 == 0 {
					id := fmt.Sprintf("n%031x", seq.Add(1))
					req := store.ClaimRequest{ID: id, Token: "t", Lease: time.Minute, HoldTTL: time.Hour}
					if _, err := e.Claim(ctx, req); err != nil {
						failed.Add(1) // a store error: the request would get a 503
						continue
					}
					if _, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: store.Result{Status: 201, Body: body}, TTL: time.Hour}); err != nil {
						failed.Add(1)
					}
					continue
				}
				id := fmt.Sprintf("%032x", (i*7919)%records)
				r, err := e.Claim(ctx, store.ClaimRequest{ID: id, Token: "t2", Lease: time.Minute})
				switch {
				case err != nil:
					failed.Add(1)
				case r.Claimed || len(r.Record.Body) != len(body):
					b.Errorf("replay %s: %+v", id, r.Record)
					return
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("%d calls (1 in 11 a new key's claim and completion, the rest replays of random records) by %d callers in %s; %d failed (store errors)\n",
		executes+replays, callers, time.Since(began).Round(time.Millisecond), failed.Load())
	report(fmt.Sprintf("%d records, after traffic", records+int(seq.Load())))
	b.ReportMetric(rssMiB(b), "MiB-RSS")
}

// dirMiB is the size of the files under dir in MiB.
func dirMiB(b *testing.B, dir string) float64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return float64(n) / (1 << 20)
}

// BenchmarkRSSMillionTombstones prints the resident memory and the disk
// size of an engine holding the tombstones of 1,000,000 completed records
// that expired (IDEMGATE_TOMBSTONES changes the count): the records,
// each carrying its tombstone, are written in batches as completions
// write them (putRecord), the records living 2s and their tombstones an
// hour more; the sweep turns the records into their tombstones, and
// claims through the contract then find them.
//
//	go test -run '^$' -bench RSSMillionTombstones -benchtime 1x ./store/embedded/
func BenchmarkRSSMillionTombstones(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("IDEMGATE_TOMBSTONES")); err == nil && v > 0 {
		n = v
	}
	dir := b.TempDir()
	e, err := Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	report := func(stage string) {
		runtime.GC()
		m := e.db.Metrics()
		fmt.Printf("%-44s RSS %6.1f MiB  block cache %5.1f MiB  DIR %6.1f MiB (tables %6.1f MiB)\n",
			stage, rssMiB(b), float64(m.BlockCache.Size)/(1<<20), dirMiB(b, dir), float64(m.Total().TablesSize)/(1<<20))
	}
	report("open, empty")
	began := time.Now()
	now := e.now()
	body := []byte(strings.Repeat("b", 100))
	batch := e.db.NewBatch()
	for i := range n {
		r := &rec{Record: store.Record{
			ID: fmt.Sprintf("%032x", i), Route: "webhooks", Operation: "event", Fingerprint: "fp",
			State: store.StateCompleted, Token: "tok", StartedAt: time.UnixMilli(now), CompletedAt: time.UnixMilli(now),
			Attempts: 1, Executions: 1, Result: store.Result{Status: 200, Body: body, Digest: "d"},
		}, ExpireAt: now + 2000}
		if err := loadRecord(e, batch, r, tombOf(r, time.Hour.Milliseconds())); err != nil {
			b.Fatal(err)
		}
		if batch.Len() > 4<<20 {
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	loaded(b, e)
	fmt.Printf("wrote %d completed records carrying their tombstones in %s\n", n, time.Since(began).Round(time.Millisecond))
	report(fmt.Sprintf("%d records and tombstones", n))

	// The sweep turns the records into their tombstones once they expire.
	began = time.Now()
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(time.Second) {
		// A record turned into its tombstone has no state index key.
		it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindIndex}, UpperBound: []byte{kindIndex + 1}})
		if err != nil {
			b.Fatal(err)
		}
		left := it.First()
		_ = it.Close()
		if !left {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the sweep did not turn the expired records into tombstones in 10 minutes")
		}
	}
	fmt.Printf("the sweep turned the %d records into tombstones in %s\n", n, time.Since(began).Round(time.Second))
	if err := e.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		b.Fatal(err)
	}
	report(fmt.Sprintf("%d tombstones of expired records", n))

	// Late retries through the contract find the tombstones.
	ctx := context.Background()
	found := 0
	for i := 0; i < n; i += max(n/10_000, 1) {
		res, err := e.Claim(ctx, store.ClaimRequest{ID: fmt.Sprintf("%032x", i), Token: "late", AfterExpiry: store.AfterExpiryReject})
		if err != nil {
			b.Fatal(err)
		}
		if res.Claimed || res.Tombstone == nil || res.Tombstone.Status != 200 {
			b.Fatalf("late claim of %032x: claimed %v, tombstone %+v", i, res.Claimed, res.Tombstone)
		}
		found++
	}
	fmt.Printf("%d late claims under reject each found its tombstone\n", found)
	report(fmt.Sprintf("%d tombstones, after the late claims", n))
	b.ReportMetric(rssMiB(b), "MiB-RSS")
	b.ReportMetric(dirMiB(b, dir), "MiB-DIR")
}
