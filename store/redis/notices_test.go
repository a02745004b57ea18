package redis

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/storetest"
)

// liveWithin polls n.Live for up to d.
func liveWithin(n store.Notices, want bool, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n.Live() == want {
			return true
		}
	}
	return n.Live() == want
}

// TestNoticesSurviveRestart: when Redis goes away, the subscription says
// so (waiters poll meanwhile) and every watch is woken, so a waiter looks
// at its record; when Redis is back, the subscription is made anew,
// watches are woken once more, and notices arrive again.
func TestNoticesSurviveRestart(t *testing.T) {
	e := openRedis(t)
	n := e.s.Notices()
	if !liveWithin(n, true, 5*time.Second) {
		t.Fatal("notices not live within 5s")
	}
	w := n.Watch("waiting-one")
	defer w.Stop()

	e.srv.Restart(t)
	select {
	case <-w.C: // woken when the subscription broke, or when it came back
	case <-time.After(15 * time.Second):
		t.Fatal("a restart of Redis woke no watch")
	}
	if !liveWithin(n, true, 15*time.Second) {
		t.Fatal("notices not live again within 15s of the restart")
	}
	select { // drain a second wake-up (down, then up)
	case <-w.C:
	default:
	}

	ctx := context.Background()
	id := storetest.NewID(t)
	w2 := n.Watch(id)
	defer w2.Stop()
	if _, err := e.s.Claim(ctx, storetest.ClaimReq(id, "tok")); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.s.Release(ctx, id, "tok", time.Hour); !ok || err != nil {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	select {
	case <-w2.C:
	case <-time.After(5 * time.Second):
		t.Fatal("no notice after the subscription came back")
	}
}
