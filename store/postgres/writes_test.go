package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// rowVersion is the row version of record id (xmin and ctid): a claim
// that only reads leaves it as it is.
func rowVersion(t *testing.T, e *Engine, id string) string {
	t.Helper()
	var v string
	err := e.pool.QueryRow(context.Background(), "SELECT xmin::text || ' ' || ctid::text FROM "+e.sql.records+" WHERE id = $1", id).Scan(&v)
	if err != nil {
		t.Fatalf("row version: %v", err)
	}
	return v
}

// testReplayReads: a replay writes no row version; the attempts it
// counts show at once on the engine that counted them, and on another
// engine once flushed (countEvery).
func testReplayReads(t *testing.T, url string) {
	a := openIn(t, url, Options{})
	b := openIn(t, url, Options{Schema: a.Schema()})
	ctx := context.Background()
	id := storetest.NewID(t)
	res := storetest.MustClaim(t, a, storetest.ClaimReq(id, "tok-1"))
	ok, err := res.Claim.Complete(ctx, storetest.SampleResult())
	storetest.MustOK(t, "Complete", ok, err)
	before := rowVersion(t, a, id)
	for i := range 5 {
		r := storetest.MustClaim(t, a, storetest.ClaimReq(id, "tok-r"))
		if r.Claimed || r.Record.State != store.StateCompleted || r.Record.Attempts != int64(i+2) {
			t.Fatalf("replay %d: claimed %v, record %+v", i, r.Claimed, r.Record)
		}
	}
	if after := rowVersion(t, a, id); after != before {
		t.Fatalf("replays wrote the row: version %s, then %s", before, after)
	}
	if got := storetest.MustGet(t, a, id); got.Attempts != 6 {
		t.Fatalf("attempts on the engine that counted: %d, want 6", got.Attempts)
	}
	// b sees them once a flushed them, and counts its own on top.
	deadline := time.Now().Add(5 * time.Second)
	for storetest.MustGet(t, b, id).Attempts != 6 {
		if time.Now().After(deadline) {
			t.Fatalf("attempts on another engine: %d, want 6 within 5s", storetest.MustGet(t, b, id).Attempts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := storetest.MustClaim(t, b, storetest.ClaimReq(id, "tok-b")); r.Record.Attempts != 7 {
		t.Fatalf("replay on the other engine: attempts %d, want 7", r.Record.Attempts)
	}
	if after := rowVersion(t, a, id); after != before {
		t.Fatalf("replays wrote the row: version %s, then %s", before, after)
	}
	// A record of the same id written anew starts its count again.
	if _, err := a.pool.Exec(ctx, "UPDATE "+a.sql.records+" SET expire_at = 1 WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	again := storetest.MustClaim(t, a, storetest.ClaimReq(id, "tok-2"))
	if !again.Claimed || again.Record.Attempts != 1 {
		t.Fatalf("claim of the expired record: claimed %v, attempts %d, want a claim, 1", again.Claimed, again.Record.Attempts)
	}
	// The sweep deletes the counts of the record gone.
	if err := a.flushCounts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.flushCounts(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pool.Exec(ctx, "UPDATE "+a.sql.counts+" SET expire_at = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := a.pool.QueryRow(ctx, "SELECT count(*) FROM "+a.sql.counts+" WHERE rid = $1", id).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d counts of the record gone left after the sweep", left)
	}
}

// testNoticesForWaiters: a completion sends a notice when a duplicate
// found the record in flight, or while a waiter needs notices, and
// otherwise none.
func testNoticesForWaiters(t *testing.T, url string) {
	a := openIn(t, url, Options{})
	b := openIn(t, url, Options{Schema: a.Schema()})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{a.notices.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	notice := func(d time.Duration) string {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		n, err := conn.WaitForNotification(cctx)
		if err != nil {
			return ""
		}
		return n.Payload
	}
	// Nobody waits: no notice.
	quiet := storetest.NewID(t)
	res := storetest.MustClaim(t, a, storetest.ClaimReq(quiet, "tok"))
	ok, err := res.Claim.Complete(ctx, storetest.SampleResult())
	storetest.MustOK(t, "Complete", ok, err)
	if got := notice(300 * time.Millisecond); got != "" {
		t.Fatalf("a completion nobody waits for sent a notice for %s", got)
	}
	// A duplicate found it in flight, on another gateway: a notice.
	waited := storetest.NewID(t)
	res = storetest.MustClaim(t, a, storetest.ClaimReq(waited, "tok"))
	if dup := storetest.MustClaim(t, b, storetest.ClaimReq(waited, "tok-dup")); dup.Claimed {
		t.Fatal("the duplicate claimed")
	}
	ok, err = res.Claim.Complete(ctx, storetest.SampleResult())
	storetest.MustOK(t, "Complete", ok, err)
	if got := notice(5 * time.Second); got != waited {
		t.Fatalf("completion of a record a duplicate found in flight: notice %q, want %q", got, waited)
	}
	// A waiter needs notices on b: every completion sends one.
	done := b.Notices().Need()
	needed := storetest.NewID(t)
	res = storetest.MustClaim(t, a, storetest.ClaimReq(needed, "tok"))
	ok, err = res.Claim.Complete(ctx, storetest.SampleResult())
	storetest.MustOK(t, "Complete", ok, err)
	if got := notice(5 * time.Second); got != needed {
		t.Fatalf("completion while a waiter needs notices: notice %q, want %q", got, needed)
	}
	done()
}
