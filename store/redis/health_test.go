package redis

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestAvailabilityReported: a Redis that stops answering is reported
// down once, at the first failed claim, however many fail; when it
// answers again (found by the store's own probe, with no traffic) it is
// reported up once, with how long it was down and how many claims failed
// meanwhile.
func TestAvailabilityReported(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	events := &reports[Availability]{}
	s, err := Open(Options{Addrs: []string{srv.Addr}, OpTimeout: 300 * time.Millisecond, OnAvailability: events.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	storetest.MustClaim(t, s, storetest.ClaimReq(storetest.NewID(t), "tok"))
	if l := events.all(); len(l) != 0 {
		t.Fatalf("reports while Redis is up: %+v", l)
	}

	srv.Stop()
	const failed = 3
	for range failed {
		if _, err := s.Claim(ctx, storetest.ClaimReq(storetest.NewID(t), "tok")); err == nil {
			t.Fatal("claim with Redis stopped succeeded")
		}
	}
	l := events.all()
	if len(l) != 1 || l[0].Up || l[0].Err == nil {
		t.Fatalf("reports after %d failed claims: %+v, want one down report with its error", failed, l)
	}

	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for len(events.all()) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	l = events.all()
	if len(l) != 2 || !l[1].Up || l[1].Refused != failed || l[1].Down <= 0 {
		t.Fatalf("reports after Redis came back: %+v, want a second one: up, %d refused, a duration", l, failed)
	}
	storetest.MustClaim(t, s, storetest.ClaimReq(storetest.NewID(t), "tok"))
	if l := events.all(); len(l) != 2 {
		t.Fatalf("reports after a claim on a Redis known up: %+v", l)
	}
}
