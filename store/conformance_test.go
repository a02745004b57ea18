package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

var _ store.Engine = (*store.Store)(nil)

var prefixSeq atomic.Int64

// redisHarness opens engines on one Redis (a single node or a Cluster),
// each under a key prefix of its own, so each starts empty.
func redisHarness(opts store.Options) storetest.Harness {
	return storetest.Harness{
		Open: func(t testing.TB) store.Engine {
			o := opts
			o.KeyPrefix = fmt.Sprintf("conf%d:", prefixSeq.Add(1))
			s, err := store.Open(o)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Now: func(t testing.TB, e store.Engine) time.Time {
			now, err := e.(*store.Store).Client().Time(context.Background()).Result()
			if err != nil {
				t.Fatalf("TIME: %v", err)
			}
			return now
		},
		TTL: func(t testing.TB, e store.Engine, id string) time.Duration {
			s := e.(*store.Store)
			d, err := s.Client().PTTL(context.Background(), s.Key(id)).Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			return d
		},
	}
}

// TestConformanceRedis runs the engine contract on one redis-server.
func TestConformanceRedis(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, redisHarness(store.Options{Addrs: []string{srv.Addr}}))
}

// TestConformanceCluster runs the engine contract on a three-master
// Redis Cluster.
func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	storetest.Run(t, redisHarness(store.Options{Addrs: cl.Addrs(), Cluster: true}))
}
