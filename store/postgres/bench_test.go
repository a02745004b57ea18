package postgres

import (
	"context"
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
