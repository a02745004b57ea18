package embedded_test

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
)

// The benchmarks run on a real file system with real fsyncs (b.TempDir).
// "parallel" runs 64 goroutines (the load benchmark's connection count),
// where group commit shares one fsync among the claims that wait for it;
// "parallel-N" runs N (with GOMAXPROCS dividing N).

func benchEngine(b *testing.B) *embedded.Engine {
	e, err := embedded.Open(embedded.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	return e
}

var benchSeq atomic.Int64

// processCPU is the CPU time this process has used (every goroutine:
// the calls, Pebble's flushes and compactions, the log writer, the GC).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerOp reports the process's CPU time per operation as cpu-ns/op: on
// a shared machine it moves much less than ns/op, which includes waiting
// for the disk and for the CPU.
func cpuPerOp(b *testing.B) {
	began := processCPU()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU()-began)/float64(b.N), "cpu-ns/op")
		}
	})
}

// fsyncsPerWrite reports the fdatasyncs of the log per durable write
// (a claim is one) as fsyncs/write: how many writes group commit shares
// one fsync among.
func fsyncsPerWrite(b *testing.B, e *embedded.Engine) {
	d0, f0 := embedded.WALSyncs(e)
	b.Cleanup(func() {
		d, f := embedded.WALSyncs(e)
		if d > d0 {
			b.ReportMetric(float64(f-f0)/float64(d-d0), "fsyncs/write")
		}
	})
}

func benchBody() string {
	b := make([]byte, 500)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return string(b)
}

// claimComplete is the execute path: a new key's claim (fsync'd) and its
// result (fsync'd).
func claimComplete(b *testing.B, e *embedded.Engine, res store.Result) {
	id := strconv.FormatInt(benchSeq.Add(1), 16)
	req := claimReq(id, "tok")
	if r, err := e.Claim(ctx, req); err != nil || !r.Claimed {
		b.Fatal(r, err)
	}
	if ok, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: res, TTL: time.Hour}); err != nil || !ok {
		b.Fatal(ok, err)
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	res := result(benchBody())
	b.Run("serial", func(b *testing.B) {
		e := benchEngine(b)
		b.ReportAllocs()
		cpuPerOp(b)
		fsyncsPerWrite(b, e)
		for b.Loop() {
			claimComplete(b, e, res)
		}
	})
	for _, g := range []int{2, 8, 64} {
		name := "parallel"
		if g != 64 {
			name += "-" + strconv.Itoa(g)
		}
		b.Run(name, func(b *testing.B) {
			e := benchEngine(b)
			b.ReportAllocs()
			cpuPerOp(b)
			fsyncsPerWrite(b, e)
			b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					claimComplete(b, e, res)
				}
			})
		})
	}
}

// burnSink keeps burn's loop from being optimised away.
var burnSink atomic.Uint64

// burn spends about n µs of CPU (on an idle core): what the gateway does
// around the store's calls (HTTP, the proxied request).
func burn(n int) {
	x := uint64(n)
	for range n * 400 {
		x = x*6364136223846793005 + 1442695040888963407
		x ^= x >> 29
	}
	burnSink.Add(x & 1)
}

// BenchmarkGatewayLoad is the execute path as the gateway runs it on a
// machine whose CPUs the requests fill: 64 goroutines, each spending
// CPU before its claim (the request) and between the claim and the
// completion (the proxied call). Durable writes then reach the log one
// by one, not in bursts, and how many one fsync covers depends on how
// long a sync waits for them. cpu-ns/op includes the burn.
func BenchmarkGatewayLoad(b *testing.B) {
	res := result(benchBody())
	for _, g := range []int{2, 64} {
		b.Run("conns-"+strconv.Itoa(g), func(b *testing.B) {
			e := benchEngine(b)
			b.ReportAllocs()
			cpuPerOp(b)
			fsyncsPerWrite(b, e)
			b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					burn(60)
					id := strconv.FormatInt(benchSeq.Add(1), 16)
					req := claimReq(id, "tok")
					if r, err := e.Claim(ctx, req); err != nil || !r.Claimed {
						b.Fatal(r, err)
					}
					burn(60)
					if ok, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: res, TTL: time.Hour}); err != nil || !ok {
						b.Fatal(ok, err)
					}
				}
			})
		})
	}
}

// BenchmarkReplay is the replay path: the claim of a completed key,
// which answers with the stored result (no fsync: nothing changed that
// anyone acts on).
func BenchmarkReplay(b *testing.B) {
	e := benchEngine(b)
	const keys = 1000
	for i := range keys {
		req := claimReq(id(i), "tok")
		if _, err := e.Claim(ctx, req); err != nil {
			b.Fatal(err)
		}
		if _, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: result(benchBody()), TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	cpuPerOp(b)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(n.Add(1)) % keys
			r, err := e.Claim(ctx, claimReq(id(i), "tok-2"))
			if err != nil || r.Claimed || r.Record.Status != 201 {
				b.Fatal(r, err)
			}
		}
	})
}
