package postgres

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// The benchmarks run on a cluster of their own with fsync on, as in
// production (the test clusters turn it off), over loopback TCP.
// "parallel" runs 64 goroutines (the load benchmark's connection count)
// on a pool of 64 connections.

var benchSeq atomic.Int64

func benchEngine(b *testing.B) *Engine {
	pg := pgtest.Start(b, "fsync=on", "full_page_writes=on")
	return openIn(b, pg.CreateDatabase(b), Options{PoolSize: 64})
}

func benchResult() store.Result {
	res := storetest.SampleResult()
	res.Body = []byte(strings.Repeat("abcdefghijklmnopqrstuvwxyz", 20))
	return res
}

// claimComplete is the execute path: a new key's claim (committed
// synchronously) and its result (committed asynchronously).
func claimComplete(b *testing.B, e *Engine, res store.Result) {
	id := "b" + strconv.FormatInt(benchSeq.Add(1), 16)
	req := storetest.ClaimReq(id, "tok")
	if r, err := e.Claim(context.Background(), req); err != nil || !r.Claimed {
		b.Fatal(r, err)
	}
	if ok, err := e.Complete(context.Background(), store.CompleteRequest{Claim: req, Result: res, TTL: time.Hour}); err != nil || !ok {
		b.Fatal(ok, err)
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	res := benchResult()
	e := benchEngine(b)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			claimComplete(b, e, res)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				claimComplete(b, e, res)
			}
		})
	})
}

// BenchmarkReplay is the replay path: the claim of a completed key,
// one statement that answers with the stored result.
func BenchmarkReplay(b *testing.B) {
	e := benchEngine(b)
	const keys = 1000
	res := benchResult()
	for i := range keys {
		req := storetest.ClaimReq("r"+strconv.Itoa(i), "tok")
		if _, err := e.Claim(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		if _, err := e.Complete(context.Background(), store.CompleteRequest{Claim: req, Result: res, TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req := storetest.ClaimReq("r"+strconv.Itoa(int(n.Add(1)%keys)), "other")
				if r, err := e.Claim(context.Background(), req); err != nil || r.Record.State != store.StateCompleted {
					b.Fatal(r, err)
				}
			}
		})
	})
}

// BenchmarkTombstoneSize measures what tombstones cost Postgres: n records
// (IDEMGATE_TOMBSTONES, default 100,000) are claimed and completed through
// the contract with a 1 s TTL and a 1 h tombstone, by 64 callers; once the
// records have expired and the sweep deleted them, the size of the table
// tombstones with its indexes (pg_total_relation_size) is divided by the
// tombstones it holds.
//
//	IDEMGATE_REQUIRE_POSTGRES=1 go test -run '^$' -bench TombstoneSize -benchtime 1x ./store/postgres/
func BenchmarkTombstoneSize(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("IDEMGATE_TOMBSTONES")); err == nil && v > 0 {
		n = v
	}
	e := openIn(b, pgtest.Shared(b).CreateDatabase(b), Options{PoolSize: 64})
	ctx := context.Background()
	storetest.CompleteExpiring(b, e, n, benchResult(), time.Second, time.Hour)
	time.Sleep(1100 * time.Millisecond) // the last records expire
	swept, err := e.Sweep(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var tombs, size, recSize int64
	q := "SELECT (SELECT count(*) FROM " + e.sql.tombstones + "), pg_total_relation_size('" + e.sql.tombstones + "'), pg_total_relation_size('" + e.sql.records + "')"
	if _, err := e.pool.Exec(ctx, "VACUUM "+e.sql.tombstones); err != nil {
		b.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, q).Scan(&tombs, &size, &recSize); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("%d records completed and expired, %d rows swept: %d tombstones, table tombstones with its indexes %.1f MiB: %.0f bytes per tombstone (records table %.1f MiB before vacuum)\n",
		n, swept, tombs, float64(size)/(1<<20), float64(size)/float64(tombs), float64(recSize)/(1<<20))
	b.ReportMetric(float64(size)/float64(tombs), "B/tombstone")
}
