package caddymodule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

// TestLiveStores: the console's view of the registry is the admin API's:
// one entry per store, with the resolved routes of the newest config.
func TestLiveStores(t *testing.T) {
	h, _ := newHandler(t, `
routes:
  - name: live_deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    ttl: 2h
    confirm: true
`, testStores[0].cfg(t))
	var found []LiveStore
	for _, ls := range LiveStores() {
		if ls.Store == h.store {
			found = append(found, ls)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the handler's store is listed %d times, want once", len(found))
	}
	rt, ok := found[0].Routes["live_deals"]
	if !ok || rt.TTL != 2*time.Hour || !rt.Confirm || found[0].Tag == "" {
		t.Fatalf("live store: tag %q, route %+v (found %v)", found[0].Tag, rt, ok)
	}
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	h.use = nil // the test's own clean-up must not release it twice
	for _, ls := range LiveStores() {
		if ls.Store == h.store {
			t.Fatal("a cleaned-up handler's store is still listed")
		}
	}
}

// getter is a RecordStore whose Get answers rec, err.
type getter struct {
	RecordStore
	rec *store.Record
	err error
}

func (g getter) Get(context.Context, string) (*store.Record, error) { return g.rec, g.err }

// TestFirstHolding: the first store that has the record wins; a store
// error counts only when no store has it.
func TestFirstHolding(t *testing.T) {
	t.Parallel()
	rec, down := &store.Record{ID: "r"}, errors.New("down")
	for _, tc := range []struct {
		name    string
		stores  []getter
		wantIdx int
		wantErr error
	}{
		{"none", nil, -1, nil},
		{"absent everywhere", []getter{{}, {}}, -1, nil},
		{"second has it", []getter{{}, {rec: rec}}, 1, nil},
		{"an error, then found", []getter{{err: down}, {rec: rec}}, 1, nil},
		{"an error, not found", []getter{{}, {err: down}}, -1, down},
	} {
		got, i, err := FirstHolding(context.Background(), "r", len(tc.stores), func(i int) RecordStore { return tc.stores[i] })
		if i != tc.wantIdx || !errors.Is(err, tc.wantErr) || (i >= 0) != (got == rec) {
			t.Errorf("%s: %v, %d, %v; want index %d, error %v", tc.name, got, i, err, tc.wantIdx, tc.wantErr)
		}
	}
}
