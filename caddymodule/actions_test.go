package caddymodule

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/operator"
	"github.com/idemgate/idemgate/storepool"
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
	var found []operator.LiveStore
	for _, ls := range storepool.LiveStores() {
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
	for _, ls := range storepool.LiveStores() {
		if ls.Store == h.store {
			t.Fatal("a cleaned-up handler's store is still listed")
		}
	}
}
