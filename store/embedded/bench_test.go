package embedded_test

import (
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
// where group commit shares one fsync among the claims that wait for it.

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
		for b.Loop() {
			claimComplete(b, e, res)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		e := benchEngine(b)
		b.ReportAllocs()
		cpuPerOp(b)
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				claimComplete(b, e, res)
			}
		})
	})
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
