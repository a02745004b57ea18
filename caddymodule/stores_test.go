package caddymodule

import (
	"context"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
	"github.com/idemgate/idemgate/storepool"
)

const storesRules = `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
`

// TestEmbeddedStoreAcrossReloads: a reload's new config (provisioned
// before the old one is cleaned up) gets the embedded store the old one
// has open, so it never locks itself out of its own DIR; a request that
// entered under the old config keeps the store open after the old
// config's clean-up; the last user's clean-up closes it and gives DIR
// up.
func TestEmbeddedStoreAcrossReloads(t *testing.T) {
	sc := &embedded.Module{Dir: t.TempDir()}
	old, _ := newHandler(t, storesRules, sc)
	up := &counting{}
	if w := serve(old, up.next, "POST", "/deals", "{}", "Idempotency-Key", "k1"); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	reloaded, _ := newHandler(t, storesRules, sc)
	if reloaded.store != old.store {
		t.Fatal("the reloaded config opened a second engine on the same DIR")
	}
	old.use.Enter() // a request of the old config still running
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := reloaded.Cleanup(); err != nil {
		t.Fatal(err)
	}
	// Still open for the old config's request.
	if _, err := old.store.Claim(context.Background(), store.ClaimRequest{ID: "abc", Token: "t"}); err != nil {
		t.Fatalf("the store closed under a running request: %v", err)
	}
	old.use.Leave()
	// Closed now, and DIR is free for the next owner.
	if _, err := old.store.Get(context.Background(), "abc"); err == nil {
		t.Fatal("the store is still open after its last user left")
	}
	e, err := embedded.Open(embedded.Options{Dir: sc.Dir})
	if err != nil {
		t.Fatalf("DIR not given up: %v", err)
	}
	defer e.Close()
	if rec, err := e.Get(context.Background(), findIDIn(t, e)); err != nil || rec.State != store.StateCompleted {
		t.Fatalf("the record of the first config: %+v, %v", rec, err)
	}
}

// findIDIn returns the id of the only record of e.
func findIDIn(t *testing.T, e store.Engine) string {
	t.Helper()
	page, err := e.List(context.Background(), store.ListFilter{State: store.StateCompleted})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("records %+v, %v", page.Records, err)
	}
	return page.Records[0].ID
}

// TestStoreRegistry: provisioned handlers register their store and routes;
// handlers sharing a store show it once with the newest routes; cleaned up
// handlers leave.
func TestStoreRegistry(t *testing.T) {
	sc := testStores[0].cfg(t)
	old, _ := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    ttl: 1h
`, sc)
	reloaded, _ := newHandler(t, `
routes:
  - name: deals
    match: { path: /deals }
    key: ["{header.Idempotency-Key}"]
    ttl: 2h
  - name: refunds
    match: { path: /refunds }
    key: ["{header.Idempotency-Key}"]
    ttl: 3h
`, sc)
	if n := storepool.Default().Uses(old.use); n != 2 {
		t.Fatalf("%d registrations of the store, want 2", n)
	}
	var mine []operator.LiveStore
	for _, s := range storepool.LiveStores() {
		if s.Store == old.store {
			mine = append(mine, s)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("the shared store is listed %d times, want once", len(mine))
	}
	s := mine[0]
	if got := s.Routes["deals"].TTL; got.String() != "2h0m0s" {
		t.Errorf("deals ttl = %v, want the newest config's 2h", got)
	}
	if got := s.Routes["refunds"].TTL; got.String() != "3h0m0s" {
		t.Errorf("refunds ttl = %v, want 3h", got)
	}

	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if s := findLive(reloaded.store); s == nil || s.Routes["deals"].TTL.String() != "2h0m0s" {
		t.Errorf("after the old config's clean-up: %+v", s)
	}
	if err := reloaded.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if s := findLive(reloaded.store); s != nil {
		t.Errorf("a cleaned-up handler's store is still listed")
	}

	// A failed Provision (no store) and its Cleanup leave no entry.
	before := len(storepool.LiveStores())
	h := &Handler{}
	if err := h.Cleanup(); err != nil || len(storepool.LiveStores()) != before {
		t.Errorf("Cleanup without Provision: %v", err)
	}
}

func findLive(s store.Engine) *operator.LiveStore {
	for _, l := range storepool.LiveStores() {
		if l.Store == s {
			return &l
		}
	}
	return nil
}
