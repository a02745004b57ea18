package redis

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestClaimRightAfterRedisReturns: however many claims failed while Redis
// was down, the first claim after it answers again succeeds. (go-redis's
// pool stops dialing after PoolSize failed dials and tries again only once
// a second; the store's dialer keeps it dialing.)
func TestClaimRightAfterRedisReturns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s, err := Open(Options{Addrs: []string{srv.Addr}, PoolSize: 2, OpTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	srv.Stop()
	for range 10 {
		if _, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err == nil {
			t.Fatal("claim with Redis stopped succeeded")
		}
	}
	srv.Restart(t) // returns once Redis answers
	if _, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err != nil {
		t.Fatalf("first claim after Redis answers again: %v", err)
	}
}
