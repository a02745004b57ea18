package redis

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// benchBackends: real redis-server (skipped when missing unless
// IDEMGATE_REQUIRE_REDIS=1) and miniredis.
func benchBackends(b *testing.B, f func(b *testing.B, s *Store)) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) { f(b, be.open(b).s) })
	}
}

// benchParallelism*GOMAXPROCS goroutines run the parallel benchmarks, like
// a gateway serving many connections at once.
const benchParallelism = 32

var benchSeq atomic.Int64

// benchID returns a fresh hex id; ids spread over the shards like
// keying.KeyID's.
func benchID() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "bench/%d", benchSeq.Add(1)))
	return hex.EncodeToString(sum[:16])
}

func benchResult(bodySize int) store.Result {
	return store.Result{
		Status: 201,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/crm/deals/deal_42"},
			"Set-Cookie":   {"a=1; Path=/", "b=2; HttpOnly"},
			"X-Request-Id": {"0123456789abcdef"},
		},
		Body:       bytes.Repeat([]byte("x"), bodySize),
		Digest:     "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		ExternalID: "deal_42",
	}
}

// BenchmarkClaimComplete is the execute path: claim a new key, then store a
// 1 KiB result. Two round trips per operation.
func BenchmarkClaimComplete(b *testing.B) {
	res := benchResult(1024)
	benchBackends(b, func(b *testing.B, s *Store) {
		ctx := context.Background()
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				claimComplete(b, ctx, s, res)
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(benchParallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					claimComplete(b, ctx, s, res)
				}
			})
		})
	})
}

func claimComplete(b *testing.B, ctx context.Context, s *Store, res store.Result) {
	req := storetest.ClaimReq(benchID(), "tok")
	c, err := s.Claim(ctx, req)
	if err != nil || !c.Claimed {
		b.Fatalf("Claim: %+v, %v", c, err)
	}
	ok, err := s.Complete(ctx, storetest.Completion(req.ID, req.Token, res, time.Hour))
	if err != nil || !ok {
		b.Fatalf("Complete: %v, %v", ok, err)
	}
}

// BenchmarkReplayClaim is the replay path: a Claim on a completed key that
// returns the stored 1 KiB response. One round trip.
func BenchmarkReplayClaim(b *testing.B) {
	res := benchResult(1024)
	benchBackends(b, func(b *testing.B, s *Store) {
		ctx := context.Background()
		id := benchID()
		if c, err := s.Claim(ctx, storetest.ClaimReq(id, "tok")); err != nil || !c.Claimed {
			b.Fatalf("Claim: %+v, %v", c, err)
		}
		if ok, err := s.Complete(ctx, storetest.Completion(id, "tok", res, time.Hour)); err != nil || !ok {
			b.Fatalf("Complete: %v, %v", ok, err)
		}
		replay := func() {
			c, err := s.Claim(ctx, storetest.ClaimReq(id, "tok2"))
			if err != nil || c.Claimed || c.Record.State != store.StateCompleted || len(c.Record.Body) != 1024 {
				b.Fatalf("replay: %+v, %v", c, err)
			}
		}
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				replay()
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(benchParallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					replay()
				}
			})
		})
	})
}

// BenchmarkList reads one page of 100 records (of 2000, all states) from the
// indexes: one TIME, ZRANGEBYSCORE pipelines, one HMGET pipeline.
func BenchmarkList(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *Store) {
		ctx := context.Background()
		for range 2000 {
			claimComplete(b, ctx, s, benchResult(64))
		}
		b.ReportAllocs()
		for b.Loop() {
			page, err := s.List(ctx, store.ListFilter{Limit: 100})
			if err != nil || len(page.Records) != 100 || page.NextCursor == "" {
				b.Fatalf("List: %d records, %v", len(page.Records), err)
			}
		}
	})
}

// BenchmarkDecodeRecord decodes a completed record (5 header values, 1 KiB
// body) from its stored form, without Redis.
func BenchmarkDecodeRecord(b *testing.B) {
	res := benchResult(1024)
	bl := fullBlob()
	bl.result[rHeader], bl.body = store.EncodeHeader(res.Header), res.Body
	stored := string(bl.encode())
	b.ReportAllocs()
	for b.Loop() {
		r, _, err := decodeBlob("0123456789abcdef0123456789abcdef", stored, false)
		if err != nil || len(r.Header) != 4 {
			b.Fatal(r, err)
		}
	}
}
