package redis

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
	goredis "github.com/redis/go-redis/v9"
)

// TestListTies: index entries with equal scores (records expiring in the
// same millisecond) are paged through exactly once however the pages cut
// the run of ties.
func TestListTies(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := sameShardIDs(t, "3ab", 25)
		for _, id := range ids {
			storetest.MustClaim(t, e.s, storetest.ClaimReq(id, "tok"))
			ok, err := e.s.Release(ctx, id, "tok", time.Hour)
			storetest.MustOK(t, "Release", ok, err)
		}
		// Give every entry one of two scores, both in the future.
		idx := e.s.IndexKey("3ab", store.StateReleased)
		base := float64(redisNow(t, e.s).Add(time.Hour).UnixMilli())
		for i, id := range ids {
			if err := e.s.Client().ZAdd(ctx, idx, goredis.Z{Score: base + float64(i%2), Member: id}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(ids)
		for _, limit := range []int{1, 2, 3, 5, 12, 13, 25, 26} {
			if got := storetest.ListAll(t, e.s, store.ListFilter{State: store.StateReleased, Limit: limit}); !slices.Equal(got, ids) {
				t.Fatalf("limit %d: listed %d of %d records", limit, len(got), len(ids))
			}
		}
	})
}

func TestListBadFilter(t *testing.T) {
	t.Parallel()
	e := openMiniredisEnv(t)
	ctx := context.Background()
	for range 3 {
		storetest.MustClaim(t, e.s, storetest.ClaimReq(storetest.NewID(t), "tok"))
	}
	page, err := e.s.List(ctx, store.ListFilter{Limit: 1})
	if err != nil || page.NextCursor == "" {
		t.Fatalf("List: %+v, %v", page, err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"v2 i 000 in_flight 0 0", "v2 s 0 0 0"} { // one index per state on one node
		if _, err := e.s.List(ctx, store.ListFilter{Cursor: enc(c)}); err != nil {
			t.Fatalf("a well-formed cursor %q: %v", c, err)
		}
	}
	for _, f := range []store.ListFilter{
		{State: "done"},
		{State: "IN_FLIGHT"},
		{Cursor: "!!"},
		{Cursor: enc("v2 i 0ab in_flight")},
		{Cursor: enc("v1 0ab in_flight 0 0")},
		{Cursor: enc("v2 i 0gb in_flight 0 0")},
		{Cursor: enc("v2 i 0a in_flight 0 0")},
		{Cursor: enc("v2 i 0ab in_flight 0 0")}, // a Cluster's tag
		{Cursor: enc("v2 i 000 in_flight -1 0")},
		{Cursor: enc("v2 i 000 in_flight 1 x")},
		{Cursor: enc("v2 i 0ab completed 0 0")},
		{Cursor: enc("v2 s 0 x 0")},
		{Cursor: enc("v2 s -1 0 0")},
		{State: store.StateReleased, Cursor: enc("v2 s 0 0 0")},
		{Cursor: enc("v1 0 outcome_unknown 0 0")},
		{State: store.StateCompleted, Cursor: page.NextCursor}, // an in_flight position
	} {
		if _, err := e.s.List(ctx, f); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("List(%+v) err = %v, want ErrInvalidArgument", f, err)
		}
	}
	if _, err := e.s.List(ctx, store.ListFilter{State: store.StateInFlight, Cursor: page.NextCursor}); err != nil {
		t.Errorf("a cursor of the all-states walk in the in_flight index: %v", err)
	}
}

// TestListNonHexIDs: ids outside lowercase hex fold onto the 16 shards and
// are listed too.
func TestListNonHexIDs(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ids := []string{"Zebra_1", "-dash", "UPPER", "0-zero"}
		for _, id := range ids {
			storetest.MustClaim(t, e.s, storetest.ClaimReq(id, "tok"))
		}
		slices.Sort(ids)
		if got := storetest.ListAll(t, e.s, store.ListFilter{Limit: 2}); !slices.Equal(got, ids) {
			t.Fatalf("listed %q, want %q", got, ids)
		}
		var scanned []string
		if err := e.s.ScanIDs(context.Background(), func(id string) error { scanned = append(scanned, id); return nil }); err != nil {
			t.Fatal(err)
		}
		slices.Sort(scanned)
		if !slices.Equal(scanned, ids) {
			t.Fatalf("scanned %q, want %q", scanned, ids)
		}
	})
}
