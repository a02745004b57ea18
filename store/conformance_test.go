package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// engine puts the Redis store behind the Engine contract until the Redis
// side takes CompleteRequest, Actions and Secret itself (other changes):
// a Complete of a missing record, audit entries and the secret are
// skipped for Redis meanwhile (see redisSkips).
type engine struct{ *store.Store }

func (e engine) Complete(ctx context.Context, req store.CompleteRequest) (bool, error) {
	return e.Store.Complete(ctx, req.Claim.ID, req.Claim.Token, req.Result, req.TTL)
}

func (e engine) OperatorRelease(ctx context.Context, id string, _ store.Action, ttl time.Duration) (*store.Record, error) {
	return e.Store.OperatorRelease(ctx, id, ttl)
}

func (e engine) OperatorComplete(ctx context.Context, id string, res store.Result, _ store.Action, ttl time.Duration) (*store.Record, error) {
	return e.Store.OperatorComplete(ctx, id, res, ttl)
}

func (e engine) Secret(context.Context) ([]byte, error) {
	return nil, errors.New("store: the Redis engine keeps no secret yet")
}

var redisSkips = map[string]string{
	"CompleteWritesMissingRecord": "the Redis complete script writes a missing record in another change",
	"OperatorAudit":               "the Redis operator scripts keep audit entries in another change",
	"Secret":                      "the Redis Secret comes with the HMAC record ids change",
}

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
			return engine{s}
		},
		Now: func(t testing.TB, e store.Engine) time.Time {
			now, err := e.(engine).Client().Time(context.Background()).Result()
			if err != nil {
				t.Fatalf("TIME: %v", err)
			}
			return now
		},
		TTL: func(t testing.TB, e store.Engine, id string) time.Duration {
			s := e.(engine).Store
			d, err := s.Client().PTTL(context.Background(), s.Key(id)).Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			return d
		},
		Skip: redisSkips,
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
