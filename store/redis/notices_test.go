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
	defer n.Need()()
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

// TestNoticesOnlyWhileNeeded: a store whose notices nobody needs is not
// subscribed, so the completions of the fleet do not wake it; the first
// waiter subscribes (its watch is woken when notices are live), and the
// subscription ends once no waiter has needed it for the linger time.
func TestNoticesOnlyWhileNeeded(t *testing.T) {
	t.Parallel()
	e := openRedis(t)
	n := e.s.Notices()
	e.s.notices.linger = 200 * time.Millisecond
	ctx := context.Background()
	subscribers := func() int64 {
		t.Helper()
		counts, err := e.s.Client().PubSubNumSub(ctx, e.s.NoticeChannel()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return counts[e.s.NoticeChannel()]
	}
	subscribedWithin := func(want int64, d time.Duration) bool {
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if subscribers() == want {
				return true
			}
		}
		return subscribers() == want
	}

	time.Sleep(300 * time.Millisecond)
	if got := subscribers(); got != 0 || n.Live() {
		t.Fatalf("nobody waits: %d subscribers to %s, live %v; want none", got, e.s.NoticeChannel(), n.Live())
	}

	w := n.Watch("waiting-one")
	defer w.Stop()
	done := n.Need()
	select {
	case <-w.C: // woken when the subscription is up: a notice sent before is not missed
	case <-time.After(5 * time.Second):
		t.Fatal("the watch was not woken when the subscription came up")
	}
	if !n.Live() || subscribers() != 1 {
		t.Fatalf("a waiter needs notices: live %v, %d subscribers; want live, 1", n.Live(), subscribers())
	}
	time.Sleep(400 * time.Millisecond) // past the linger: still needed
	if subscribers() != 1 {
		t.Fatal("the subscription ended while a waiter still needed it")
	}

	done()
	done() // twice is harmless
	if !subscribedWithin(0, 5*time.Second) {
		t.Fatalf("%d subscribers 5s after the last waiter stopped; want none", subscribers())
	}
	if n.Live() {
		t.Error("notices still live with no subscription")
	}

	// The next waiter subscribes again.
	defer n.Need()()
	if !liveWithin(n, true, 5*time.Second) || subscribers() != 1 {
		t.Fatalf("a second need: live %v, %d subscribers", n.Live(), subscribers())
	}
}
