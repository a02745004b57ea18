package redis

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/idemgate/idemgate/store/storetest"
)

func TestScanIDs(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var want []string
		for range 1200 { // several SCAN pages
			id := storetest.NewID(t)
			want = append(want, id)
			storetest.MustClaim(t, e.s, storetest.ClaimReq(id, "tok"))
		}
		// Keys that are not records of this store.
		c := e.s.Client()
		for _, k := range []string{"idemgate:plain", "idemgate:{bad id}", "other:{0123456789abcdef0123456789abcdef}", "idemgate:{a}{b}"} {
			if err := c.Set(ctx, k, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// A store whose prefix has glob characters sees only its own keys.
		odd := New(c, "odd*[x]:", 0)
		oddID := storetest.NewID(t)
		storetest.MustClaim(t, odd, storetest.ClaimReq(oddID, "tok"))
		if err := c.Set(ctx, "oddy[x]:{"+oddID+"}", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}

		seen := map[string]bool{}
		if err := e.s.ScanIDs(ctx, func(id string) error { seen[id] = true; return nil }); err != nil {
			t.Fatal(err)
		}
		got := make([]string, 0, len(seen))
		for id := range seen {
			got = append(got, id)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("ScanIDs found %d ids, want %d (first got %q)", len(got), len(want), got[:min(3, len(got))])
		}

		var oddSeen []string
		if err := odd.ScanIDs(ctx, func(id string) error { oddSeen = append(oddSeen, id); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(oddSeen, []string{oddID}) {
			t.Fatalf("glob prefix store saw %q, want [%s]", oddSeen, oddID)
		}

		stop := errors.New("stop")
		n := 0
		err := e.s.ScanIDs(ctx, func(string) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Fatalf("fn error: got %v after %d calls, want stop after 1", err, n)
		}
	})
}
