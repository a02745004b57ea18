package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idemgate/idemgate/store"
)

// keysOf lists every key of e's database, in order.
func keysOf(t *testing.T, e *Engine) []string {
	t.Helper()
	it, err := e.db.NewIter(&pebble.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var keys []string
	for it.First(); it.Valid(); it.Next() {
		if it.Key()[0] != kindMeta {
			keys = append(keys, string(it.Key()))
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// wantKeys checks that e holds exactly want (kind byte, then the rest of
// the key after the id's place as a readable string).
func wantKeys(t *testing.T, e *Engine, what string, want ...string) {
	t.Helper()
	got := keysOf(t, e)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: the database holds %d keys %q; want %d keys %q", what, len(got), got, len(want), want)
	}
}

// sweptPast waits until the engine's clock passes at, then sweeps.
func sweptPast(t *testing.T, e *Engine, at int64) {
	t.Helper()
	for e.now() <= at {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := e.sweep(); err != nil {
		t.Fatal(err)
	}
}

// TestTombstoneInRecordKey: a tombstone lives in its record's own key. A
// completion that leaves one writes the record's keys and nothing else;
// the sweep turns the expired record into its tombstone under the same
// key, with one expiry key at the tombstone's end; a late claim finds it
// with the record key's read; a record claimed anew carries it, and
// leaves it again when it expires unless it left one of its own.
func TestTombstoneInRecordKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	id := fmt.Sprintf("%032x", 7)
	req := store.ClaimRequest{ID: id, Route: "hooks", Operation: "event", Fingerprint: "fp", Token: "tok-1",
		Lease: time.Minute, HoldTTL: time.Hour, Tombstone: time.Hour}
	if c, err := e.Claim(ctx, req); err != nil || !c.Claimed {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	res := store.Result{Status: 202, Body: []byte("accepted"), Digest: "d"}
	ok, err := e.Complete(ctx, store.CompleteRequest{Claim: req, Result: res, TTL: 50 * time.Millisecond, Tombstone: time.Hour})
	if !ok || err != nil {
		t.Fatalf("complete: %v, %v", ok, err)
	}
	done, err := e.read(id)
	if err != nil || done == nil {
		t.Fatalf("read: %+v, %v", done, err)
	}
	// A completed record has no state index key (see indexed).
	wantKeys(t, e, "after the completion", string(recordKey(id)), string(expiryKey(done.ExpireAt, id)))

	sweptPast(t, e, done.ExpireAt)
	until := done.ExpireAt + time.Hour.Milliseconds()
	wantKeys(t, e, "after the sweep", string(recordKey(id)), string(expiryKey(until, id)))
	if r, err := e.Get(ctx, id); r != nil || err != nil {
		t.Fatalf("Get of the expired record: %+v, %v; want nil, nil", r, err)
	}
	if p, err := e.List(ctx, store.ListFilter{}); err != nil || len(p.Records) != 0 {
		t.Fatalf("List after the sweep: %+v, %v; want no records", p, err)
	}
	if has, err := e.hasRecords(); has || err != nil {
		t.Fatalf("hasRecords with only a tombstone: %v, %v; want false", has, err)
	}
	if at := e.ExpiresAt(id); !at.IsZero() {
		t.Fatalf("ExpiresAt of the expired record: %v; want none", at)
	}
	want := store.Tombstone{ID: id, CompletedAt: done.CompletedAt, Status: 202}
	late := req
	late.Token, late.AfterExpiry, late.HoldTTL = "tok-2", store.AfterExpiryReject, 50*time.Millisecond
	got, err := e.Claim(ctx, late)
	if err != nil || got.Claimed || got.Record != nil || got.Tombstone == nil || *got.Tombstone != want {
		t.Fatalf("late claim under reject: %+v, %v; want tombstone %+v, nothing created", got, err, want)
	}

	// Claimed anew, the record carries the tombstone; held past its
	// short life, it leaves that tombstone again.
	late.AfterExpiry = store.AfterExpiryExecute
	got, err = e.Claim(ctx, late)
	if err != nil || !got.Claimed || got.Tombstone == nil || *got.Tombstone != want {
		t.Fatalf("late claim under execute: %+v, %v", got, err)
	}
	again, _ := e.read(id)
	inFlight := string([]byte{kindIndex, byte(stateIdx(store.StateInFlight))}) + id
	// A record in flight has no expiry key (see expiring): the sweep
	// finds it through its state index.
	wantKeys(t, e, "after the claim anew", inFlight, string(recordKey(id)))
	sweptPast(t, e, again.ExpireAt)
	wantKeys(t, e, "after the new claim expired", string(recordKey(id)), string(expiryKey(until, id)))
	late.AfterExpiry, late.Token = store.AfterExpiryReject, "tok-3"
	if got, err = e.Claim(ctx, late); err != nil || got.Claimed || got.Tombstone == nil || *got.Tombstone != want {
		t.Fatalf("claim once the new record expired: %+v, %v; want tombstone %+v", got, err, want)
	}

	// store check reads the tombstone as no record, and no damage.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := Check(dir); err != nil || len(rep.Damage) != 0 || len(rep.Records) != 0 {
		t.Fatalf("Check of a DIR holding a tombstone alone: %+v, %v; want no records, no damage", rep, err)
	}
}
