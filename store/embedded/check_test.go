package embedded_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
)

// TestChecksSurviveReopen: a record's check (with its match values), its checks, streak, next
// check and a running check's lease are on disk: after a reopen the
// record reads the same, the lease still fences a second check, and the
// check that held it can end.
func TestChecksSurviveReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := embedded.Open(embedded.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	req := claimReq(id(1), "A")
	req.Check = store.Check{Method: "GET", URL: "http://crm/deals?source_key=k", After: time.Hour,
		Match: []store.CheckMatch{{Path: "0.source_key", Value: "k"}, {Path: "0.title", Value: "Acme \"renewal\"\n"}}}
	mustClaim(t, e, req)
	if ok, err := e.MarkUnknown(ctx, id(1), "A", "upstream_5xx", time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	end := func(e *embedded.Engine, tok string) *store.Record {
		t.Helper()
		rec, ok, err := e.EndCheck(ctx, store.CheckOutcome{ID: id(1), ClaimToken: "A", CheckToken: tok,
			CheckReport: store.CheckReport{Entry: store.CheckEntry{Status: 200, Verdict: store.VerdictNotApplied},
				NotFoundChecks: 2, Every: time.Hour, Next: time.Minute, TTL: time.Hour}})
		if err != nil || !ok {
			t.Fatalf("EndCheck %s: %v, %v", tok, ok, err)
		}
		return rec
	}
	if _, ok, err := e.BeginCheck(ctx, id(1), "A", "c1", time.Minute, false); !ok || err != nil {
		t.Fatal(ok, err)
	}
	end(e, "c1")
	if _, ok, err := e.BeginCheck(ctx, id(1), "A", "c2", time.Minute, false); !ok || err != nil {
		t.Fatal(ok, err)
	}
	before, _ := e.Get(ctx, id(1))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open(t, dir)
	after, err := e.Get(ctx, id(1))
	if err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("after a reopen:\n got %+v, %v\nwant %+v", after, err, before)
	}
	if !reflect.DeepEqual(after.Check, req.Check) || len(after.Checks) != 1 || after.NotFoundStreak != 1 || after.CheckLeaseUntil.IsZero() {
		t.Fatalf("record: %+v", after)
	}
	if _, ok, err := e.BeginCheck(ctx, id(1), "A", "c3", time.Minute, false); ok || err != nil {
		t.Fatalf("a second check while the reopened lease lives: %v, %v", ok, err)
	}
	// Sooner than every: recorded, not counted; still held.
	if rec := end(e, "c2"); rec.State != store.StateUnknown || rec.NotFoundStreak != 1 || rec.CheckCount != 2 {
		t.Fatalf("after the second check: %+v", rec)
	}
}
