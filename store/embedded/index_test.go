package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// An execute writes the claim's state index key and the result's expiry
// key, no other: after the completion the database holds the record and
// its expiry key; a record in flight is swept through its state index.
func TestExecuteIndexKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const id = "0000000000000000000000000000000a"
	req := knownClaim(id)
	if _, err := e.Claim(ctx, req); err != nil {
		t.Fatal(err)
	}
	inFlight := string(indexKey(stateIdx(store.StateInFlight), id))
	wantKeys(t, e, "after the claim", inFlight, string(recordKey(id)))
	res := store.Result{Status: 201, Body: []byte("{}"), Digest: "d"}
	if ok, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: res, TTL: time.Hour}); !ok || err != nil {
		t.Fatalf("complete: %v, %v", ok, err)
	}
	done, _ := e.read(id)
	wantKeys(t, e, "after the completion", string(recordKey(id)), string(expiryKey(done.ExpireAt, id)))

	// Held for a moment only, a claim left in flight is swept.
	const left = "0000000000000000000000000000000b"
	short := knownClaim(left)
	short.HoldTTL = 30 * time.Millisecond
	if _, err := e.Claim(ctx, short); err != nil {
		t.Fatal(err)
	}
	r, _ := e.read(left)
	sweptPast(t, e, r.ExpireAt)
	wantKeys(t, e, "after the claim left in flight expired", string(recordKey(id)), string(expiryKey(done.ExpireAt, id)))
}

// A DIR written by a version that indexed completed records and gave
// records in flight an expiry key opens without them: the completed
// records' index keys are deleted at Open, a record in flight's expiry key
// by the sweep; List and the sweep work on.
func TestOldIndexKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	now := e.now()
	done := &rec{Record: store.Record{ID: "0000000000000000000000000000000c", State: store.StateCompleted}, ExpireAt: now + 3_600_000}
	flight := &rec{Record: store.Record{ID: "0000000000000000000000000000000d", State: store.StateInFlight}, ExpireAt: now + 100}
	b := e.db.NewBatch()
	for _, r := range []*rec{done, flight} {
		// As the earlier version wrote them: both index keys.
		if err := b.Set(recordKey(r.ID), appendRecord(nil, r, tomb{}), nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Set(indexKey(stateIdx(r.State), r.ID), nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Set(expiryKey(r.ExpireAt, r.ID), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err = Open(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	wantKeys(t, e, "after Open",
		string(indexKey(stateIdx(store.StateInFlight), flight.ID)),
		string(recordKey(done.ID)), string(recordKey(flight.ID)),
		string(expiryKey(flight.ExpireAt, flight.ID)), string(expiryKey(done.ExpireAt, done.ID)))
	if p, err := e.List(ctx, store.ListFilter{State: store.StateCompleted}); err != nil || len(p.Records) != 1 || p.Records[0].ID != done.ID {
		t.Fatalf("List of completed records: %+v, %v", p, err)
	}
	sweptPast(t, e, flight.ExpireAt)
	wantKeys(t, e, "after the record in flight expired", string(recordKey(done.ID)), string(expiryKey(done.ExpireAt, done.ID)))
}

// The walk of completed records through the record keys is bounded: past
// listMaxScan records of other states a page ends short, with a cursor
// that goes on from there, and the walk still reaches every completed
// record.
func TestListCompletedPastOtherStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	now := e.now()
	b := e.db.NewBatch()
	const others = listMaxScan + 50
	for i := range others {
		r := &rec{Record: store.Record{ID: fmt.Sprintf("a%031d", i), State: store.StateInFlight}, ExpireAt: now + 3_600_000}
		if err := loadRecord(e, b, r, tomb{}); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range 3 {
		r := &rec{Record: store.Record{ID: fmt.Sprintf("b%031d", i), State: store.StateCompleted}, ExpireAt: now + 3_600_000}
		if err := loadRecord(e, b, r, tomb{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, r.ID)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	loaded(t, e)
	first, err := e.List(ctx, store.ListFilter{State: store.StateCompleted, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Records) != 0 || first.NextCursor == "" {
		t.Fatalf("the first page, past %d records in flight: %d records, cursor %q; want none, and a cursor", others, len(first.Records), first.NextCursor)
	}
	var got []string
	f := store.ListFilter{State: store.StateCompleted, Limit: 10, Cursor: first.NextCursor}
	for range 5 {
		p, err := e.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Records {
			got = append(got, r.ID)
		}
		if f.Cursor = p.NextCursor; f.Cursor == "" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the walk listed %q, want %q", got, want)
	}
}
