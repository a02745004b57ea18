package redis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// env is one store under test plus the means to break its Redis.
type env struct {
	s    *Store
	srv  *redistest.Server    // nil for miniredis
	mini *miniredis.Miniredis // nil for redis-server
	stop func()               // make Redis unreachable
}

type backend struct {
	name string
	open func(t testing.TB) *env
}

var backends = []backend{
	{"redis", openRedis},
	{"miniredis", openMiniredisEnv},
}

func openRedis(t testing.TB) *env {
	t.Helper()
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}, OpTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &env{s: s, srv: srv, stop: srv.Stop}
}

func openMiniredisEnv(t testing.TB) *env {
	t.Helper()
	s, m, err := openMiniredis(Options{OpTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("openMiniredis: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &env{s: s, mini: m, stop: m.Close}
}

// eachBackend runs f against a fresh store of every backend.
func eachBackend(t *testing.T, f func(t *testing.T, e *env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			f(t, b.open(t))
		})
	}
}

// redisNow is the Redis server's clock.
func redisNow(t testing.TB, s *Store) time.Time {
	t.Helper()
	now, err := s.Client().Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

func pttl(t testing.TB, s *Store, id string) time.Duration {
	t.Helper()
	d, err := s.Client().PTTL(context.Background(), s.Key(id)).Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	return d
}

func TestKeyLayout(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := storetest.NewID(t)
		shard := id[:3]
		record := "idemgate:{" + shard + "}" + id
		index := "idemgate:idx:in_flight" // one per state on a single node
		if got := e.s.Key(id); got != record {
			t.Fatalf("Key = %q, want %q", got, record)
		}
		if got := e.s.IndexKey(shard, store.StateInFlight); got != index {
			t.Fatalf("IndexKey = %q, want %q", got, index)
		}
		storetest.MustClaim(t, e.s, storetest.ClaimReq(id, "tok"))
		keys, err := e.s.Client().Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		want := []string{record, index}
		slices.Sort(keys)
		slices.Sort(want)
		if !slices.Equal(keys, want) {
			t.Fatalf("keys in Redis: %q, want %q", keys, want)
		}
		if typ, _ := e.s.Client().Type(ctx, record).Result(); typ != "string" {
			t.Fatalf("record type %q, want string", typ)
		}
		if typ, _ := e.s.Client().Type(ctx, index).Result(); typ != "zset" {
			t.Fatalf("index type %q, want zset", typ)
		}

		custom := New(e.s.Client(), "tenant1:idem:", 0)
		storetest.MustClaim(t, custom, storetest.ClaimReq(id, "tok"))
		if n, err := e.s.Client().Exists(ctx, "tenant1:idem:{"+shard+"}"+id, "tenant1:idem:idx:in_flight").Result(); err != nil || n != 2 {
			t.Fatalf("custom prefix keys missing: %d, %v", n, err)
		}

		for _, bad := range []string{"", "a}b", "a{b", "with space", "x:y", strings.Repeat("a", 129), "caf\xc3\xa9"} {
			if _, err := e.s.Claim(ctx, storetest.ClaimReq(bad, "tok")); !errors.Is(err, store.ErrInvalidID) {
				t.Errorf("Claim(%q) err = %v, want ErrInvalidID", bad, err)
			}
			if _, err := e.s.Get(ctx, bad); !errors.Is(err, store.ErrInvalidID) {
				t.Errorf("Get(%q) err = %v, want ErrInvalidID", bad, err)
			}
			if _, err := e.s.Complete(ctx, storetest.Completion(bad, "tok", store.Result{}, time.Hour)); !errors.Is(err, store.ErrInvalidID) {
				t.Errorf("Complete(%q) err = %v, want ErrInvalidID", bad, err)
			}
		}
	})
}

// TestRedisDown checks that every call fails with an error, promptly, when
// Redis is unreachable, and (real Redis) that the store recovers after a
// restart, whose empty script cache the EVAL fallback handles.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := storetest.NewID(t)
		storetest.MustClaim(t, e.s, storetest.ClaimReq(id, "tok"))
		e.stop()

		calls := map[string]func() error{
			"Claim": func() error { _, err := e.s.Claim(ctx, storetest.ClaimReq(id, "tok2")); return err },
			"Renew": func() error { _, err := e.s.Renew(ctx, id, "tok", time.Second); return err },
			"Complete": func() error {
				_, err := e.s.Complete(ctx, storetest.Completion(id, "tok", storetest.SampleResult(), time.Hour))
				return err
			},
			"Release":     func() error { _, err := e.s.Release(ctx, id, "tok", time.Hour); return err },
			"MarkUnknown": func() error { _, err := e.s.MarkUnknown(ctx, id, "tok", "x", time.Hour); return err },
			"Get":         func() error { _, err := e.s.Get(ctx, id); return err },
		}
		for name, call := range calls {
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("%s against a stopped Redis: no error", name)
				}
				if !strings.HasPrefix(err.Error(), "store: ") {
					t.Fatalf("%s error %q lacks the store: prefix", name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s hung against a stopped Redis", name)
			}
		}

		if e.srv == nil {
			return
		}
		e.srv.Restart(t)
		var res store.ClaimResult
		var err error
		for range 50 { // the pool may hand out a dead connection or two first
			if res, err = e.s.Claim(ctx, storetest.ClaimReq(id, "tok3")); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || !res.Claimed {
			t.Fatalf("Claim after restart: %+v, %v", res, err)
		}
	})
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no address", Options{}, "no Redis address"},
		{"several addresses", Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, "need cluster or master_name"},
		{"nothing listening", Options{Addrs: []string{"127.0.0.1:1"}, DialTimeout: time.Second}, "ping Redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.opts)
			if err == nil {
				_ = s.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestCheckVersion(t *testing.T) {
	for info, ok := range map[string]bool{
		"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n": true,
		"# Server\r\nredis_version:8.2.1\r\n":                           true,
		"# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n": false,
		"# Server\r\nredis_version:5.0.7\r\n":                           false,
		"":                                                              true, // INFO denied: not known, let through
	} {
		if err := checkVersion(info); (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", info, err, ok)
		}
	}
	if err := checkVersion("redis_version:6.2.14\r\n"); err == nil || !strings.Contains(err.Error(), "6.2.14 is too old: 7.0 or newer is required") {
		t.Errorf("error %v", err)
	}
}
