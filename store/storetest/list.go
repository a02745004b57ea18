package storetest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(
		test{"ListWalksEverythingOnce", testListWalksEverythingOnce},
		test{"ListLimits", testListLimits},
		test{"ListBadFilter", testListBadFilter},
		test{"ListNonHexIDs", testListNonHexIDs},
		test{"ListFollowsTransitions", testListFollowsTransitions},
		test{"ExpiredRecordsAreNotListed", testExpiredRecordsAreNotListed},
	)
}

// Walk follows List from the first page to the end and returns every page.
func Walk(t testing.TB, e store.Engine, f store.ListFilter) []store.ListPage {
	t.Helper()
	var pages []store.ListPage
	for range 10000 {
		page, err := e.List(context.Background(), f)
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

// ListEvery returns every record listed under f.
func ListEvery(t testing.TB, e store.Engine, f store.ListFilter) []*store.Record {
	t.Helper()
	var out []*store.Record
	for _, p := range Walk(t, e, f) {
		out = append(out, p.Records...)
	}
	return out
}

// ListAll returns the ids of every record listed under f, sorted, and
// fails on a record listed twice.
func ListAll(t testing.TB, e store.Engine, f store.ListFilter) []string {
	t.Helper()
	var ids []string
	for _, r := range ListEvery(t, e, f) {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	if d := slices.Compact(slices.Clone(ids)); len(d) != len(ids) {
		t.Fatalf("List(%+v) returned a record twice", f)
	}
	return ids
}

type ListFixture struct {
	ByState map[store.State][]string // sorted ids by state
	ByRoute map[string][]string      // sorted ids by route
	All     []string                 // every id, sorted
}

// MakeRecords creates n records per state on two routes.
func MakeRecords(t *testing.T, e store.Engine, n int) ListFixture {
	t.Helper()
	ctx := context.Background()
	fx := ListFixture{ByState: map[store.State][]string{}, ByRoute: map[string][]string{}}
	states := store.IndexStates()
	for i := range 4 * n {
		id := NewID(t)
		req := ClaimReq(id, "tok")
		req.Route = []string{"deals", "refunds"}[i%2]
		MustClaim(t, e, req)
		st := states[i%4]
		var ok bool
		var err error
		switch st {
		case store.StateInFlight:
			ok = true
		case store.StateCompleted:
			ok, err = complete(e, id, "tok", SampleResult(), time.Hour)
		case store.StateUnknown:
			ok, err = e.MarkUnknown(ctx, id, "tok", "upstream_5xx", time.Hour)
		case store.StateReleased:
			ok, err = e.Release(ctx, id, "tok", time.Hour)
		}
		MustOK(t, string(st), ok, err)
		fx.ByState[st] = append(fx.ByState[st], id)
		fx.ByRoute[req.Route] = append(fx.ByRoute[req.Route], id)
		fx.All = append(fx.All, id)
	}
	for _, ids := range fx.ByState {
		slices.Sort(ids)
	}
	for _, ids := range fx.ByRoute {
		slices.Sort(ids)
	}
	slices.Sort(fx.All)
	return fx
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// testListWalksEverythingOnce: every filter and page size visits exactly
// the matching records, each once; pages respect the limit and carry no
// token, header or body.
func testListWalksEverythingOnce(t *testing.T, h Harness, e store.Engine) {
	fx := MakeRecords(t, e, 40) // 160 records
	type tc struct {
		f    store.ListFilter
		want []string
	}
	var cases []tc
	for _, limit := range []int{0, 1, 7, 100, 1000} {
		cases = append(cases, tc{store.ListFilter{Limit: limit}, fx.All})
	}
	for _, st := range store.IndexStates() {
		ids := fx.ByState[st]
		cases = append(cases, tc{store.ListFilter{State: st, Limit: 9}, ids})
		cases = append(cases, tc{store.ListFilter{State: st, Route: "refunds", Limit: 4}, intersect(ids, fx.ByRoute["refunds"])})
	}
	cases = append(cases,
		tc{store.ListFilter{State: "unknown", Limit: 50}, fx.ByState[store.StateUnknown]},
		tc{store.ListFilter{Route: "deals", Limit: 13}, fx.ByRoute["deals"]},
		tc{store.ListFilter{Route: "nope"}, nil},
	)
	for _, c := range cases {
		t.Run(fmt.Sprintf("%+v", c.f), func(t *testing.T) {
			pages := Walk(t, e, c.f)
			limit := c.f.Limit
			if limit == 0 {
				limit = store.DefaultListLimit
			}
			want := c.f.State
			if want == "unknown" {
				want = store.StateUnknown
			}
			var got []string
			for i, p := range pages {
				if len(p.Records) > limit {
					t.Fatalf("page %d has %d records, limit %d", i, len(p.Records), limit)
				}
				if c.f.Route == "" && i < len(pages)-1 && len(p.Records) != limit {
					t.Fatalf("page %d has %d records before the end, want %d", i, len(p.Records), limit)
				}
				for _, r := range p.Records {
					got = append(got, r.ID)
					if want != "" && r.State != want {
						t.Fatalf("record %s in state %q listed under %q", r.ID, r.State, c.f.State)
					}
					if c.f.Route != "" && r.Route != c.f.Route {
						t.Fatalf("record %s of route %q listed under %q", r.ID, r.Route, c.f.Route)
					}
					if r.Token != "" || r.Header != nil || r.Body != nil {
						t.Fatalf("listed record carries token, header or body: %+v", r)
					}
					if r.Attempts != 1 || r.Executions != 1 || r.StartedAt.IsZero() || r.Operation == "" {
						t.Fatalf("listed record lacks its summary: %+v", r)
					}
				}
			}
			slices.Sort(got)
			if d := slices.Compact(slices.Clone(got)); len(d) != len(got) {
				t.Fatal("a record was listed twice")
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("listed %d records, want %d", len(got), len(c.want))
			}
			if c.f.Limit == 1 && len(pages) != len(c.want) {
				t.Fatalf("%d pages of 1 for %d records (an empty last page?)", len(pages), len(c.want))
			}
		})
	}

	// A listed completed record has its result summary.
	page, err := e.List(context.Background(), store.ListFilter{State: store.StateCompleted, Limit: 1})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("List completed: %+v, %v", page, err)
	}
	want := SampleResult()
	if r := page.Records[0]; r.Status != 201 || r.Digest != want.Digest || r.ExternalID != "deal_42" || r.CompletedAt.IsZero() {
		t.Fatalf("completed summary %+v", r)
	}
}

// testListLimits: a Limit above the maximum is lowered to it, and the
// page is then full.
func testListLimits(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	for range store.MaxListLimit + 5 {
		MustClaim(t, e, ClaimReq(NewID(t), "tok"))
	}
	page, err := e.List(ctx, store.ListFilter{Limit: 5000})
	if err != nil || len(page.Records) != store.MaxListLimit || page.NextCursor == "" {
		t.Fatalf("List(Limit 5000): %d records, cursor %q, %v", len(page.Records), page.NextCursor, err)
	}
	rest, err := e.List(ctx, store.ListFilter{Limit: 5000, Cursor: page.NextCursor})
	if err != nil || len(rest.Records) != 5 || rest.NextCursor != "" {
		t.Fatalf("second page: %d records, cursor %q, %v", len(rest.Records), rest.NextCursor, err)
	}
	page, err = e.List(ctx, store.ListFilter{})
	if err != nil || len(page.Records) != store.DefaultListLimit {
		t.Fatalf("List(default): %d records, %v", len(page.Records), err)
	}
}

// testListBadFilter: an unknown state, a cursor that is not one, and a
// cursor made for another state filter are refused as invalid arguments.
func testListBadFilter(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	for range 3 {
		MustClaim(t, e, ClaimReq(NewID(t), "tok"))
	}
	page, err := e.List(ctx, store.ListFilter{Limit: 1})
	if err != nil || page.NextCursor == "" {
		t.Fatalf("List: %+v, %v", page, err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, f := range []store.ListFilter{
		{State: "done"},
		{State: "IN_FLIGHT"},
		{Cursor: "!!"},
		{Cursor: enc("v0 nonsense")},
		{State: store.StateCompleted, Cursor: page.NextCursor}, // an in_flight position
	} {
		if _, err := e.List(ctx, f); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("List(%+v) err = %v, want ErrInvalidArgument", f, err)
		}
	}
	if _, err := e.List(ctx, store.ListFilter{State: store.StateInFlight, Cursor: page.NextCursor}); err != nil {
		t.Errorf("a cursor of the all-states walk in the in_flight index: %v", err)
	}
}

// testListNonHexIDs: ids outside lowercase hex are listed too.
func testListNonHexIDs(t *testing.T, h Harness, e store.Engine) {
	ids := []string{"Zebra_1", "-dash", "UPPER", "0-zero"}
	for _, id := range ids {
		MustClaim(t, e, ClaimReq(id, "tok"))
	}
	slices.Sort(ids)
	if got := ListAll(t, e, store.ListFilter{Limit: 2}); !slices.Equal(got, ids) {
		t.Fatalf("listed %q, want %q", got, ids)
	}
}

// testListFollowsTransitions walks a record through every state change
// and checks after each step that listing by state finds it under the new
// state only, with the lifetime that state gives it.
func testListFollowsTransitions(t *testing.T, h Harness, e store.Engine) {
	WalkTransitions(t, h, e, func(t *testing.T, id string, want store.State, ttl time.Duration) {
		checkListed(t, e, id, want)
		CheckTTL(t, h, e, id, ttl)
		if r := MustGet(t, e, id); r.State != want {
			t.Fatalf("state %q, want %q", r.State, want)
		}
	})
}

// WalkTransitions walks records of e through every state change (claims,
// duplicates, completions, releases, holds, lease expiry, operator
// actions), a subtest per walk, and calls check after each step with the
// state the record must now be in and the lifetime that state gives it.
func WalkTransitions(t *testing.T, h Harness, e store.Engine, check func(t *testing.T, id string, want store.State, ttl time.Duration)) {
	type step struct {
		name string
		do   func(t *testing.T, id string)
		want store.State
		ttl  time.Duration
	}
	claim := func(token string, lease time.Duration, onExpired store.Expired) func(t *testing.T, id string) {
		return func(t *testing.T, id string) {
			req := ClaimReq(id, token)
			req.Lease, req.OnExpired, req.HoldTTL = lease, onExpired, 2*time.Hour
			MustClaim(t, e, req)
		}
	}
	expire := func(t *testing.T, id string) { WaitPast(t, h, e, MustGet(t, e, id).LeaseUntil) }
	completeBy := func(token string) func(t *testing.T, id string) {
		return func(t *testing.T, id string) {
			ok, err := complete(e, id, token, SampleResult(), 3*time.Hour)
			MustOK(t, "Complete", ok, err)
		}
	}
	release := func(token string) func(t *testing.T, id string) {
		return func(t *testing.T, id string) {
			ok, err := e.Release(context.Background(), id, token, 4*time.Hour)
			MustOK(t, "Release", ok, err)
		}
	}
	markUnknown := func(token string) func(t *testing.T, id string) {
		return func(t *testing.T, id string) {
			ok, err := e.MarkUnknown(context.Background(), id, token, "upstream_5xx", 5*time.Hour)
			MustOK(t, "MarkUnknown", ok, err)
		}
	}
	opRelease := func(t *testing.T, id string) {
		if _, err := e.OperatorRelease(context.Background(), id, act, 6*time.Hour); err != nil {
			t.Fatalf("OperatorRelease: %v", err)
		}
	}
	opComplete := func(t *testing.T, id string) {
		if _, err := e.OperatorComplete(context.Background(), id, SampleResult(), act, 7*time.Hour); err != nil {
			t.Fatalf("OperatorComplete: %v", err)
		}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"claim, duplicate, complete, replay", []step{
			{"claim", claim("A", time.Minute, "hold"), store.StateInFlight, 2 * time.Hour},
			{"duplicate", claim("B", time.Minute, "hold"), store.StateInFlight, 2 * time.Hour},
			{"complete", completeBy("A"), store.StateCompleted, 3 * time.Hour},
			{"replay", claim("C", time.Minute, "hold"), store.StateCompleted, 3 * time.Hour},
		}},
		{"release, reclaim, mark unknown", []step{
			{"claim", claim("A", time.Minute, "hold"), store.StateInFlight, 2 * time.Hour},
			{"release", release("A"), store.StateReleased, 4 * time.Hour},
			{"reclaim", claim("B", time.Minute, "hold"), store.StateInFlight, 2 * time.Hour},
			{"mark unknown", markUnknown("B"), store.StateUnknown, 5 * time.Hour},
			{"late complete", completeBy("B"), store.StateCompleted, 3 * time.Hour},
		}},
		{"lease expiry: hold", []step{
			{"claim", claim("A", 300*time.Millisecond, "hold"), store.StateInFlight, 2 * time.Hour},
			{"lease runs out", expire, store.StateInFlight, 2 * time.Hour},
			{"retry holds", claim("B", time.Minute, "hold"), store.StateUnknown, 2 * time.Hour},
			{"operator release", opRelease, store.StateReleased, 6 * time.Hour},
			{"retry executes", claim("C", time.Minute, "hold"), store.StateInFlight, 2 * time.Hour},
		}},
		{"lease expiry: take over", []step{
			{"claim", claim("A", 300*time.Millisecond, "release"), store.StateInFlight, 2 * time.Hour},
			{"lease runs out", expire, store.StateInFlight, 2 * time.Hour},
			{"take over", claim("B", time.Minute, "release"), store.StateInFlight, 2 * time.Hour},
			{"mark unknown", markUnknown("B"), store.StateUnknown, 5 * time.Hour},
			{"operator complete", opComplete, store.StateCompleted, 7 * time.Hour},
			{"operator release", opRelease, store.StateReleased, 6 * time.Hour},
			{"operator complete again", opComplete, store.StateCompleted, 7 * time.Hour},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := NewID(t)
			for _, st := range tc.steps {
				st.do(t, id)
				t.Run(st.name, func(t *testing.T) { check(t, id, st.want, st.ttl) })
			}
		})
	}
}

// testExpiredRecordsAreNotListed: a record is not listed from the moment
// it expires.
func testExpiredRecordsAreNotListed(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	short, long := NewID(t), NewID(t)
	MustClaim(t, e, ClaimReq(short, "tok"))
	ok, err := e.Release(ctx, short, "tok", 300*time.Millisecond)
	MustOK(t, "Release", ok, err)
	released := store.ListFilter{State: store.StateReleased}
	if got := ListAll(t, e, released); !slices.Equal(got, []string{short}) {
		t.Fatalf("released records %q, want [%s]", got, short)
	}
	WaitPast(t, h, e, h.Now(t, e).Add(310*time.Millisecond))
	if got := ListAll(t, e, released); len(got) != 0 {
		t.Fatalf("expired record still listed: %q", got)
	}
	MustClaim(t, e, ClaimReq(long, "tok"))
	ok, err = e.Release(ctx, long, "tok", time.Hour)
	MustOK(t, "Release", ok, err)
	if got := ListAll(t, e, released); !slices.Equal(got, []string{long}) {
		t.Fatalf("released records %q, want [%s]", got, long)
	}
}
