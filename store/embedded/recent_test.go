package embedded

import (
	"context"
	"fmt"
	"hash/maphash"
	"reflect"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// The hint remembers what was marked for at least one generation, rarely
// claims an id nobody marked, and forgets an id two generations later.
func TestRecentKeysGenerations(t *testing.T) {
	var r recentKeys
	r.init(maphash.MakeSeed())
	name := func(p string, i int) string { return fmt.Sprintf("%s-%08d", p, i) }
	const n = 1000
	for i := range n {
		r.mark(name("kept", i))
	}
	for i := range n {
		if !r.has(name("kept", i)) {
			t.Fatalf("%s was marked and is not remembered", name("kept", i))
		}
	}
	false1 := 0
	for i := range n {
		if r.has(name("never", i)) {
			false1++
		}
	}
	if false1 > n/50 {
		t.Fatalf("%d of %d ids never marked are taken for recent", false1, n)
	}
	for i := range 2 * recentGen {
		r.mark(name("later", i))
	}
	left := 0
	for i := range n {
		if r.has(name("kept", i)) {
			left++
		}
	}
	if left > n/10 {
		t.Fatalf("%d of %d ids marked two generations ago are still taken for recent", left, n)
	}
	t.Logf("false positives: %d/%d fresh, %d/%d two generations later", false1, n, left, n)
}

// Get and the prefix seeks read the same thing, wherever the key lives
// (memtable, tables) and whatever it holds.
func TestReadsAgree(t *testing.T) {
	ctx := context.Background()
	e, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	claim := func(id, token string) store.ClaimRequest {
		return store.ClaimRequest{ID: id, Route: "r", Operation: "op", Fingerprint: "fp", FingerprintRule: "whole-body",
			Token: token, Lease: 30 * time.Second, HoldTTL: time.Hour}
	}
	res := store.Result{Status: 201, Header: map[string][]string{"A": {"b"}}, Body: []byte("body"), Digest: "d"}
	if _, err := e.Claim(ctx, claim("flight", "t")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"done", "replayed"} {
		if _, err := e.Claim(ctx, claim(id, "t")); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.Complete(ctx, store.CompleteRequest{Claim: claim(id, "t"), Result: res, TTL: time.Hour}); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	if r, err := e.Claim(ctx, claim("replayed", "t2")); err != nil || r.Claimed {
		t.Fatal(r, err)
	}
	// The replay's attempt count is not waited for: it is written once
	// the record's lock is free again.
	held, err := e.locks.take(ctx, "replayed", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	ids := []string{"flight", "done", "replayed", "missing"}
	check := func(where string) {
		for _, id := range ids {
			g, gerr := e.getSlot(id)
			s, serr := e.seekSlot(id)
			if gerr != nil || serr != nil {
				t.Fatalf("%s, %s: %v, %v", where, id, gerr, serr)
			}
			if !reflect.DeepEqual(g, s) {
				t.Fatalf("%s, %s: Get read %+v, the seek %+v", where, id, g, s)
			}
			if (g.rec == nil) != (id == "missing") || (id == "replayed") != g.attempts {
				t.Fatalf("%s, %s: read %+v", where, id, g)
			}
		}
	}
	check("memtable")
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}
	check("tables")
}
