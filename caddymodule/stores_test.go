package caddymodule

import (
	"context"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/embedded"
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
	old.use.enter() // a request of the old config still running
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
	old.use.leave()
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
