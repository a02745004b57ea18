package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestEvictionRefused: a Redis whose maxmemory-policy may evict records is
// refused at Open with an error naming the policy, and on every new
// connection (a reconnect after a restart or CONFIG SET), unless
// AllowEviction. With AllowEviction, the secret kept in Redis is used only
// when the policy cannot evict it (volatile-*: it has no TTL, and Secret
// removes any); under allkeys-* Secret refuses, so that an evicted secret
// is never silently replaced by a new one (which would orphan every
// record): the secret must then be configured.
func TestEvictionRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl"} {
		srv := redistest.Start(t, "--maxmemory-policy", policy)
		if _, err := Open(Options{Addrs: []string{srv.Addr}}); err == nil || !strings.Contains(err.Error(), "maxmemory-policy "+policy) || !strings.Contains(err.Error(), "allow_eviction") {
			t.Errorf("Open on %s: %v, want an error naming the policy and allow_eviction", policy, err)
		}
		s, err := Open(Options{Addrs: []string{srv.Addr}, AllowEviction: true})
		if err != nil {
			t.Fatalf("Open on %s with AllowEviction: %v", policy, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		_, err = s.Secret(ctx)
		if strings.HasPrefix(policy, "allkeys-") {
			if err == nil || !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), "secret") {
				t.Errorf("Secret under %s with AllowEviction: %v, want a refusal naming the policy", policy, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Secret under %s: %v", policy, err)
		}
		if ttl, err := srv.Client(t).PTTL(ctx, s.SecretKey()).Result(); err != nil || ttl != -1 {
			t.Errorf("secret's TTL under %s: %v, %v; want none", policy, ttl, err)
		}
	}

	// A secret that was given a TTL loses it when read.
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	admin := srv.Client(t)
	if err := admin.Set(ctx, s.SecretKey(), strings.Repeat("s", 32), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Secret(ctx); err != nil {
		t.Fatal(err)
	}
	if ttl := admin.PTTL(ctx, s.SecretKey()).Val(); ttl >= 0 {
		t.Errorf("secret's TTL after Secret: %v, want none", ttl)
	}

	// Reconnect: the policy changed under a running store.
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err == nil || !strings.Contains(err.Error(), "allkeys-lfu") {
		t.Fatalf("claim after the policy became allkeys-lfu and the store reconnected: %v, want an error naming it", err)
	}
}
