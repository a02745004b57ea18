package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/idemgate/idemgate/internal/redistest"
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

var idSeq atomic.Int64

// newID returns a record id shaped like keying.KeyID (32 hex characters).
func newID(t testing.TB) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", t.Name(), idSeq.Add(1)))
	return hex.EncodeToString(sum[:])[:32]
}

func claimReq(id, token string) ClaimRequest {
	return ClaimRequest{
		ID:              id,
		Route:           "create_crm_deal",
		Operation:       "create_crm_deal",
		Fingerprint:     "fp-1",
		FingerprintRule: "body=amount,currency",
		Token:           token,
		Lease:           30 * time.Second,
		HoldTTL:         720 * time.Hour,
		OnExpired:       ExpiredHold,
	}
}

func mustClaim(t testing.TB, s *Store, req ClaimRequest) ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("Claim(%s, token %s): %v", req.ID, req.Token, err)
	}
	if res.Record == nil {
		t.Fatalf("Claim(%s): nil record", req.ID)
	}
	return res
}

func mustGet(t testing.TB, s *Store, id string) *Record {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if r == nil {
		t.Fatalf("Get(%s): no record", id)
	}
	return r
}

func mustOK(t testing.TB, what string, ok bool, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !ok {
		t.Fatalf("%s: false, want true", what)
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

// waitPast polls the Redis clock until it is past deadline.
func waitPast(t testing.TB, s *Store, deadline time.Time) {
	t.Helper()
	for range 3000 {
		if redisNow(t, s).After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("Redis clock never passed %v", deadline)
}

func pttl(t testing.TB, s *Store, id string) time.Duration {
	t.Helper()
	d, err := s.Client().PTTL(context.Background(), s.Key(id)).Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	return d
}

// checkTTL asserts that the key's TTL is within (want-slack, want].
func checkTTL(t testing.TB, s *Store, id string, want time.Duration) {
	t.Helper()
	const slack = 5 * time.Second
	if got := pttl(t, s, id); got > want || got <= want-slack {
		t.Fatalf("PTTL = %v, want within (%v, %v]", got, want-slack, want)
	}
}

func sampleResult() Result {
	body := []byte("{\"id\":\"deal_42\"}")
	sum := sha256.Sum256(body)
	return Result{
		Status:     201,
		Header:     http.Header{"Content-Type": {"application/json"}, "Location": {"/crm/deals/deal_42"}},
		Body:       body,
		Digest:     hex.EncodeToString(sum[:]),
		ExternalID: "deal_42",
	}
}

func TestKeyLayout(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		shard := id[:3]
		record := "idemgate:{" + shard + "}" + id
		index := "idemgate:idx:in_flight" // one per state on a single node
		if got := e.s.Key(id); got != record {
			t.Fatalf("Key = %q, want %q", got, record)
		}
		if got := e.s.IndexKey(shard, StateInFlight); got != index {
			t.Fatalf("IndexKey = %q, want %q", got, index)
		}
		mustClaim(t, e.s, claimReq(id, "tok"))
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
		mustClaim(t, custom, claimReq(id, "tok"))
		if n, err := e.s.Client().Exists(ctx, "tenant1:idem:{"+shard+"}"+id, "tenant1:idem:idx:in_flight").Result(); err != nil || n != 2 {
			t.Fatalf("custom prefix keys missing: %d, %v", n, err)
		}

		for _, bad := range []string{"", "a}b", "a{b", "with space", "x:y", strings.Repeat("a", 129), "caf\xc3\xa9"} {
			if _, err := e.s.Claim(ctx, claimReq(bad, "tok")); !errors.Is(err, ErrInvalidID) {
				t.Errorf("Claim(%q) err = %v, want ErrInvalidID", bad, err)
			}
			if _, err := e.s.Get(ctx, bad); !errors.Is(err, ErrInvalidID) {
				t.Errorf("Get(%q) err = %v, want ErrInvalidID", bad, err)
			}
			if _, err := e.s.Complete(ctx, completion(bad, "tok", Result{}, time.Hour)); !errors.Is(err, ErrInvalidID) {
				t.Errorf("Complete(%q) err = %v, want ErrInvalidID", bad, err)
			}
		}
	})
}

// TestRedisDown checks that every call fails with an error, promptly, when
// Redis is unreachable, and (real Redis) that the store recovers after a
// restart, whose empty script cache the EVAL fallback handles.
func TestRedisDown(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id := newID(t)
		mustClaim(t, e.s, claimReq(id, "tok"))
		e.stop()

		calls := map[string]func() error{
			"Claim": func() error { _, err := e.s.Claim(ctx, claimReq(id, "tok2")); return err },
			"Renew": func() error { _, err := e.s.Renew(ctx, id, "tok", time.Second); return err },
			"Complete": func() error {
				_, err := e.s.Complete(ctx, completion(id, "tok", sampleResult(), time.Hour))
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
		var res ClaimResult
		var err error
		for range 50 { // the pool may hand out a dead connection or two first
			if res, err = e.s.Claim(ctx, claimReq(id, "tok3")); err == nil {
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

func TestNewToken(t *testing.T) {
	a, b := NewToken(), NewToken()
	if len(a) != 32 || a == b {
		t.Fatalf("tokens %q %q", a, b)
	}
}

// completion is the CompleteRequest of a claim on id with token.
func completion(id, token string, res Result, ttl time.Duration) CompleteRequest {
	return CompleteRequest{Claim: ClaimRequest{ID: id, Token: token}, Result: res, TTL: ttl}
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
