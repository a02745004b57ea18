package store

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// walk follows List from the first page to the end and returns every page.
func walk(t testing.TB, s *Store, f ListFilter) []ListPage {
	t.Helper()
	var pages []ListPage
	for range 10000 {
		page, err := s.List(context.Background(), f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		pages = append(pages, page)
		if page.NextCursor == "" {
			return pages
		}
		if page.NextCursor == f.Cursor {
			t.Fatalf("List(%+v) returned its own cursor again", f)
		}
		f.Cursor = page.NextCursor
	}
	t.Fatal("List never ended")
	return nil
}

// listAll returns the ids of every record listed under f, sorted, and fails
// on a record listed twice.
func listAll(t testing.TB, s *Store, f ListFilter) []string {
	t.Helper()
	var ids []string
	for _, p := range walk(t, s, f) {
		for _, r := range p.Records {
			ids = append(ids, r.ID)
		}
	}
	slices.Sort(ids)
	if d := slices.Compact(slices.Clone(ids)); len(d) != len(ids) {
		t.Fatalf("List(%+v) returned a record twice", f)
	}
	return ids
}

type listFixture struct {
	byState map[State][]string
	byRoute map[string][]string
	all     []string
}

// makeRecords creates n records per state on two routes, spread over the
// shards.
func makeRecords(t *testing.T, s *Store, n int) listFixture {
	t.Helper()
	ctx := context.Background()
	fx := listFixture{byState: map[State][]string{}, byRoute: map[string][]string{}}
	for i := range 4 * n {
		id := newID(t)
		req := claimReq(id, "tok")
		req.Route = []string{"deals", "refunds"}[i%2]
		mustClaim(t, s, req)
		st := indexStates[i%4]
		var ok bool
		var err error
		switch st {
		case StateInFlight:
			ok = true
		case StateCompleted:
			ok, err = s.Complete(ctx, completion(id, "tok", sampleResult(), time.Hour))
		case StateUnknown:
			ok, err = s.MarkUnknown(ctx, id, "tok", "upstream_5xx", time.Hour)
		case StateReleased:
			ok, err = s.Release(ctx, id, "tok", time.Hour)
		}
		mustOK(t, string(st), ok, err)
		fx.byState[st] = append(fx.byState[st], id)
		fx.byRoute[req.Route] = append(fx.byRoute[req.Route], id)
		fx.all = append(fx.all, id)
	}
	for _, ids := range fx.byState {
		slices.Sort(ids)
	}
	for _, ids := range fx.byRoute {
		slices.Sort(ids)
	}
	slices.Sort(fx.all)
	return fx
}

// TestListTies: index entries with equal scores (records expiring in the
// same millisecond) are paged through exactly once however the pages cut
// the run of ties.
func TestListTies(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := sameShardIDs(t, "3ab", 25)
		for _, id := range ids {
			mustClaim(t, e.s, claimReq(id, "tok"))
			ok, err := e.s.Release(ctx, id, "tok", time.Hour)
			mustOK(t, "Release", ok, err)
		}
		// Give every entry one of two scores, both in the future.
		idx := e.s.IndexKey("3ab", StateReleased)
		base := float64(redisNow(t, e.s).Add(time.Hour).UnixMilli())
		for i, id := range ids {
			if err := e.s.Client().ZAdd(ctx, idx, redis.Z{Score: base + float64(i%2), Member: id}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(ids)
		for _, limit := range []int{1, 2, 3, 5, 12, 13, 25, 26} {
			if got := listAll(t, e.s, ListFilter{State: StateReleased, Limit: limit}); !slices.Equal(got, ids) {
				t.Fatalf("limit %d: listed %d of %d records", limit, len(got), len(ids))
			}
		}
	})
}

func TestListBadFilter(t *testing.T) {
	e := openMiniredisEnv(t)
	ctx := context.Background()
	for range 3 {
		mustClaim(t, e.s, claimReq(newID(t), "tok"))
	}
	page, err := e.s.List(ctx, ListFilter{Limit: 1})
	if err != nil || page.NextCursor == "" {
		t.Fatalf("List: %+v, %v", page, err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"v2 i 000 in_flight 0 0", "v2 s 0 0 0"} { // one index per state on one node
		if _, err := e.s.List(ctx, ListFilter{Cursor: enc(c)}); err != nil {
			t.Fatalf("a well-formed cursor %q: %v", c, err)
		}
	}
	for _, f := range []ListFilter{
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
		{State: StateReleased, Cursor: enc("v2 s 0 0 0")},
		{Cursor: enc("v1 0 outcome_unknown 0 0")},
		{State: StateCompleted, Cursor: page.NextCursor}, // an in_flight position
	} {
		if _, err := e.s.List(ctx, f); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("List(%+v) err = %v, want ErrInvalidArgument", f, err)
		}
	}
	if _, err := e.s.List(ctx, ListFilter{State: StateInFlight, Cursor: page.NextCursor}); err != nil {
		t.Errorf("a cursor of the all-states walk in the in_flight index: %v", err)
	}
}

// TestListNonHexIDs: ids outside lowercase hex fold onto the 16 shards and
// are listed too.
func TestListNonHexIDs(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ids := []string{"Zebra_1", "-dash", "UPPER", "0-zero"}
		for _, id := range ids {
			mustClaim(t, e.s, claimReq(id, "tok"))
		}
		slices.Sort(ids)
		if got := listAll(t, e.s, ListFilter{Limit: 2}); !slices.Equal(got, ids) {
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
