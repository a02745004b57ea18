package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(test{"Notices", testNotices})
}

// noticeWithin is how long a notice may take to arrive in these tests:
// far more than it takes, so a slow machine does not fail them.
const noticeWithin = 5 * time.Second

// liveNotices returns e's notices once they are live, needed until the
// test ends.
func liveNotices(t *testing.T, e store.Engine) store.Notices {
	t.Helper()
	nf, ok := e.(store.Notifier)
	if !ok {
		t.Fatalf("%T has no notices (store.Notifier): waiters would have to poll it", e)
	}
	n := nf.Notices()
	t.Cleanup(n.Need())
	for range 500 {
		if n.Live() {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("notices did not become live within 5s")
	return nil
}

// woken reports whether w receives within d.
func woken(w *store.Watch, d time.Duration) bool {
	select {
	case <-w.C:
		return true
	case <-time.After(d):
		return false
	}
}

// notDoneAct records a "not done" execution under a budget of max.
func notDoneAct(e store.Engine, max int64) func(id, token string) (bool, error) {
	return func(id, token string) (bool, error) {
		o, err := e.NotDone(context.Background(), store.NotDoneRequest{ID: id, Token: token, Status: 503, MaxExecutions: max})
		return o != store.NotDoneLost, err
	}
}

// testNotices: Complete, Release, MarkUnknown and NotDone wake the watches of
// their record when they act, and only then; watches of other records
// and stopped watches are not woken.
func testNotices(t *testing.T, _ Harness, e store.Engine) {
	n := liveNotices(t, e)
	ctx := context.Background()
	steps := []struct {
		name string
		act  func(id, token string) (bool, error)
	}{
		{"Complete", func(id, token string) (bool, error) { return complete(e, id, token, SampleResult(), time.Hour) }},
		{"Release", func(id, token string) (bool, error) { return e.Release(ctx, id, token, time.Hour) }},
		{"MarkUnknown", func(id, token string) (bool, error) { return e.MarkUnknown(ctx, id, token, "upstream_5xx", time.Hour) }},
		{"NotDone releasing", notDoneAct(e, 5)},
		{"NotDone exhausting", notDoneAct(e, 1)},
	}
	for _, st := range steps {
		id, other := NewID(t), NewID(t)
		w, wOther, wStopped := n.Watch(id), n.Watch(other), n.Watch(id)
		wStopped.Stop()
		MustClaim(t, e, ClaimReq(id, "tok"))
		MustClaim(t, e, ClaimReq(other, "tok"))

		// A fenced-out call changes nothing and sends no notice.
		ok, err := st.act(id, "not-the-token")
		MustLose(t, st.name+" with another token", ok, err)
		if woken(w, 200*time.Millisecond) {
			t.Errorf("%s fenced out: the watch was woken", st.name)
		}

		ok, err = st.act(id, "tok")
		MustOK(t, st.name, ok, err)
		if !woken(w, noticeWithin) {
			t.Fatalf("%s: no notice within %s", st.name, noticeWithin)
		}
		if woken(wOther, 100*time.Millisecond) {
			t.Errorf("%s: another record's watch was woken", st.name)
		}
		if woken(wStopped, 0) {
			t.Errorf("%s: a stopped watch was woken", st.name)
		}
		w.Stop()
		wOther.Stop()
		w.Stop() // twice is harmless
	}
}
