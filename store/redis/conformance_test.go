package redis

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

var _ store.Engine = (*Store)(nil)

var prefixSeq atomic.Int64

// redisHarness opens engines on one Redis (a single node or a Cluster),
// each under a key prefix of its own, so each starts empty.
func redisHarness(opts Options) storetest.Harness {
	h := probe
	h.Open = func(t testing.TB) store.Engine {
		o := opts
		o.KeyPrefix = fmt.Sprintf("conf%d:", prefixSeq.Add(1))
		s, err := Open(o)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	return h
}

// probe reads a Redis engine's clock (TIME) and a record's remaining
// lifetime (PTTL), for the suite's helpers.
var probe = storetest.Harness{
	Now: func(t testing.TB, e store.Engine) time.Time { return redisNow(t, e.(*Store)) },
	TTL: func(t testing.TB, e store.Engine, id string) time.Duration { return pttl(t, e.(*Store), id) },
}

// TestConformanceRedis runs the engine contract on one redis-server.
func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	storetest.Run(t, redisHarness(Options{Addrs: []string{srv.Addr}}))
}

// TestConformanceCluster runs the engine contract on a three-master
// Redis Cluster.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	storetest.Run(t, redisHarness(Options{Addrs: cl.Addrs(), Cluster: true}))
}
