package redis

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestNoRoom: a Redis at its maxmemory (noeviction) refuses a result and
// a renewal with store.ErrNoRoom; once it has memory again the same
// result is stored under the same claim.
func TestNoRoom(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	s, err := Open(Options{Addrs: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	id := storetest.NewID(t)
	res, err := s.Claim(ctx, storetest.ClaimReq(id, "tok"))
	if err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	admin := srv.Client(t)
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	result := store.Result{Status: 201, Body: []byte(`{"id":"D-1"}`)}
	if ok, err := res.Claim.Complete(ctx, result); ok || !errors.Is(err, store.ErrNoRoom) {
		t.Fatalf("complete at maxmemory: %v %v, want store.ErrNoRoom", ok, err)
	} else {
		t.Logf("complete at maxmemory: %v", err)
	}
	if ok, err := res.Claim.Renew(ctx); ok || !errors.Is(err, store.ErrNoRoom) {
		t.Fatalf("renew at maxmemory: %v %v, want store.ErrNoRoom", ok, err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := res.Claim.Complete(ctx, result); !ok || err != nil {
		t.Fatalf("complete with memory again: %v %v", ok, err)
	}
	if r, err := s.Get(ctx, id); err != nil || r == nil || r.State != store.StateCompleted || string(r.Body) != `{"id":"D-1"}` {
		t.Fatalf("record: %+v %v, want completed with the result", r, err)
	}
}
