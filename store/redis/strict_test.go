package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// TestWaitStrict: with WaitStrict a claim that fewer replicas than
// WaitReplicas acknowledged is not used: Claim fails with
// ErrReplicasShort and the record is left released, so the next delivery
// may claim it again. A replay of a completed record is answered, and a
// completion keeps going on (counted short) as without WaitStrict. With
// the replica back, claims are used again.
func TestWaitStrict(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	short := &reports[WaitShortfall]{}
	s, err := Open(Options{Addrs: []string{master.Addr}, WaitReplicas: 1, WaitStrict: true,
		WaitTimeout: 20 * time.Millisecond, OnWaitShort: short.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()

	for _, tc := range []struct {
		name    string
		prepare func(id string) // the record before the strict claim
	}{
		{"new key", func(string) {}},
		{"released record", func(id string) {
			storetest.MustClaim(t, s.plain(t), storetest.ClaimReq(id, "first"))
			ok, err := s.Release(ctx, id, "first", time.Hour)
			storetest.MustOK(t, "Release", ok, err)
		}},
	} {
		id := storetest.NewID(t)
		tc.prepare(id)
		short.take()
		res, err := s.Claim(ctx, storetest.ClaimReq(id, "tok"))
		if !errors.Is(err, store.ErrReplicasShort) || res.Claimed {
			t.Fatalf("%s: strict claim without a replica = %+v, %v; want ErrReplicasShort", tc.name, res, err)
		}
		if r := storetest.MustGet(t, s, id); r.State != store.StateReleased {
			t.Fatalf("%s: record after a refused strict claim: %s, want released", tc.name, r.State)
		}
		if l := short.take(); len(l) != 1 || l[0].Op != "claim" || !l[0].Refused {
			t.Fatalf("%s: shortfalls %+v, want one refused claim", tc.name, l)
		}
	}

	// A completed record replays; a completion goes on short.
	id := storetest.NewID(t)
	storetest.MustClaim(t, s.plain(t), storetest.ClaimReq(id, "tok"))
	ok, err := s.Complete(ctx, storetest.Completion(id, "tok", storetest.SampleResult(), time.Hour))
	storetest.MustOK(t, "Complete without a replica (strict)", ok, err)
	if l := short.take(); len(l) != 1 || l[0].Op != "complete" || l[0].Refused {
		t.Fatalf("shortfalls of a strict completion: %+v, want one, not refused", l)
	}
	res, err := s.Claim(ctx, storetest.ClaimReq(id, "tok2"))
	if err != nil || res.Claimed || res.Record.State != store.StateCompleted {
		t.Fatalf("replay under strict without a replica: %+v, %v", res, err)
	}

	redistest.StartReplica(t, master)
	id = storetest.NewID(t)
	if res, err := s.Claim(ctx, storetest.ClaimReq(id, "tok")); err != nil || !res.Claimed {
		t.Fatalf("strict claim with the replica: %+v, %v", res, err)
	}
	if l := short.take(); len(l) != 0 {
		t.Fatalf("shortfalls with the replica: %+v", l)
	}
}

// plain is a second store on the same Redis without WAIT, to set records up.
func (s *Store) plain(t *testing.T) *Store {
	t.Helper()
	p := New(s.Client(), s.Prefix(), 0)
	p.onClose = nil
	return p
}
