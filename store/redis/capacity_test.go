package redis

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkClusterCosts measures what docs/capacity.md is worked out from,
// on a local three-master Cluster: Redis CPU (used_cpu_sys + used_cpu_user
// of every master, from INFO), commands (INFO commandstats, those inside
// the scripts included) and memory (used_memory) per execute with a 300 B
// and a 2 KiB body, and per replay, with 64 concurrent callers. Use a
// fixed count for the memory figure, e.g. -benchtime 20000x.
func BenchmarkClusterCosts(b *testing.B) {
	cl, s := openCluster(b)
	masters := make([]*goredis.Client, len(cl.Nodes))
	for i, n := range cl.Nodes {
		masters[i] = n.Client(b)
	}
	ctx := context.Background()
	var replayIDs []string
	for _, size := range []int{300, 2048} {
		res := benchResult(size)
		b.Run(fmt.Sprintf("execute/body=%d", size), func(b *testing.B) {
			before := clusterCounters(b, masters)
			all := make([]string, b.N)
			ids := make(chan string, b.N)
			for i := range all {
				all[i] = benchID()
				ids <- all[i]
			}
			close(ids)
			b.SetParallelism(benchParallelism) // 64 callers on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := <-ids
					req := storetest.ClaimReq(id, store.NewToken())
					c, err := s.Claim(ctx, req)
					if err != nil || !c.Claimed {
						b.Errorf("claim: %+v, %v", c, err)
						return
					}
					done := store.CompleteRequest{Claim: req, StartedAt: c.Record.StartedAt, Result: res, TTL: time.Hour}
					if ok, err := s.Complete(ctx, done); !ok || err != nil {
						b.Errorf("complete: %v, %v", ok, err)
						return
					}
				}
			})
			b.StopTimer()
			clusterCounters(b, masters).report(b, before, b.N, true)
			if size == 300 {
				replayIDs = all[:min(1000, len(all))]
			}
		})
	}
	b.Run("replay", func(b *testing.B) {
		if len(replayIDs) == 0 {
			b.Skip("no records to replay")
		}
		before := clusterCounters(b, masters)
		var next atomic.Int64
		b.SetParallelism(benchParallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := replayIDs[int(next.Add(1))%len(replayIDs)]
				c, err := s.Claim(ctx, storetest.ClaimReq(id, "other"))
				if err != nil || c.Record.State != store.StateCompleted {
					b.Errorf("replay: %+v, %v", c, err)
					return
				}
			}
		})
		b.StopTimer()
		clusterCounters(b, masters).report(b, before, b.N, false)
	})
}

// counters are the sums over the masters of what BenchmarkClusterCosts
// reports.
type counters struct {
	cpu      time.Duration
	commands int64
	memory   int64
}

func clusterCounters(b *testing.B, masters []*goredis.Client) counters {
	var c counters
	for _, m := range masters {
		for name, calls := range redistest.CommandStats(b, m) {
			if name != "info" {
				c.commands += calls
			}
		}
		info, err := m.Info(context.Background(), "cpu", "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\r\n") {
			name, value, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch {
			case name == "used_cpu_sys" || name == "used_cpu_user":
				f, _ := strconv.ParseFloat(value, 64)
				c.cpu += time.Duration(f * float64(time.Second))
			case name == "used_memory":
				n, _ := strconv.ParseInt(value, 10, 64)
				c.memory += n
			}
		}
	}
	return c
}

func (c counters) report(b *testing.B, before counters, n int, memory bool) {
	b.ReportMetric(float64((c.cpu-before.cpu).Microseconds())/float64(n), "redis-µs/op")
	b.ReportMetric(float64(c.commands-before.commands)/float64(n), "cmds/op")
	if memory {
		b.ReportMetric(float64(c.memory-before.memory)/float64(n), "B/record")
	}
}

// BenchmarkTombstoneMemory measures what a tombstone costs Redis: n
// records (IDEMGATE_TOMBSTONES, default 100,000) are claimed and completed
// through the contract with a 1 s TTL and a 1 h tombstone, by 64 callers;
// once the records have expired, used_memory (INFO memory) is compared
// with what it was before, per tombstone left.
//
//	IDEMGATE_REQUIRE_REDIS=1 go test -run '^$' -bench TombstoneMemory -benchtime 1x ./store/redis/
func BenchmarkTombstoneMemory(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("IDEMGATE_TOMBSTONES")); err == nil && v > 0 {
		n = v
	}
	srv := redistest.Start(b)
	s, err := Open(Options{Addrs: []string{srv.Addr}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	admin := srv.Client(b)
	ctx := context.Background()
	usedMemory := func() int64 {
		info, err := admin.Info(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		_, rest, _ := strings.Cut(info, "used_memory:")
		v, _, _ := strings.Cut(rest, "\r\n")
		m, _ := strconv.ParseInt(v, 10, 64)
		return m
	}
	before := usedMemory()
	storetest.CompleteExpiring(b, s, n, benchResult(300), time.Second, time.Hour)
	loaded := usedMemory()
	// Redis deletes expired keys by itself, a sample at a time, and each
	// expired key SCAN meets: once the records' TTL is over, a SCAN of the
	// whole key space (bounded: a few passes) leaves the tombstones.
	time.Sleep(1100 * time.Millisecond)
	var keys int64
	for range 10 {
		it := admin.Scan(ctx, 0, "", 1000).Iterator()
		for it.Next(ctx) {
		}
		if err := it.Err(); err != nil {
			b.Fatal(err)
		}
		if keys, err = admin.DBSize(ctx).Result(); err != nil {
			b.Fatal(err)
		}
		if keys <= int64(n)+3 {
			break
		}
	}
	after := usedMemory()
	tombs, err := admin.Keys(ctx, s.Prefix()+"{*}"+tombstoneInfix+"*").Result()
	if err != nil {
		b.Fatal(err)
	}
	v, _ := admin.Get(ctx, tombs[0]).Result()
	fmt.Printf("%d records with 300-byte answers and their tombstones: used_memory %+.1f MiB; records expired: %d keys left, %d of them tombstones (value %q, %d bytes, key %d bytes); used_memory %+.1f MiB over the start: %.0f bytes per tombstone\n",
		n, float64(loaded-before)/(1<<20), keys, len(tombs), v, len(v), len(tombs[0]),
		float64(after-before)/(1<<20), float64(after-before)/float64(len(tombs)))
	b.ReportMetric(float64(after-before)/float64(len(tombs)), "B/tombstone")
}
