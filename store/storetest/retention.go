package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(
		test{"TombstoneAfterExpiry", testTombstoneAfterExpiry},
		test{"NoTombstone", testNoTombstone},
		test{"TombstoneExpires", testTombstoneExpires},
		test{"TombstoneOutlivesAClaimAnew", testTombstoneOutlivesAClaimAnew},
		test{"TombstoneOfCheckAndOperator", testTombstoneOfCheckAndOperator},
		test{"Twin", testTwin},
		test{"TwinExpires", testTwinExpires},
		test{"RetentionArguments", testRetentionArguments},
	)
}

// claimOf runs Claim and checks the handle as MustClaim does, allowing
// the nil record of a claim that created nothing.
func claimOf(t *testing.T, e store.Engine, req store.ClaimRequest) store.ClaimResult {
	t.Helper()
	res, err := e.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("Claim(%s, token %s): %v", req.ID, req.Token, err)
	}
	if (res.Claim != nil) != res.Claimed || res.Claimed && res.Record == nil {
		t.Fatalf("Claim(%s): claimed %v with the handle %+v and record %+v", req.ID, res.Claimed, res.Claim, res.Record)
	}
	return res
}

// completedShortly claims id and completes it through the claim's handle
// with a record lifetime of ttl and the request's retention settings,
// and returns the completed record.
func completedShortly(t *testing.T, e store.Engine, req store.ClaimRequest, ttl time.Duration) *store.Record {
	t.Helper()
	req.TTL = ttl
	c := MustClaim(t, e, req)
	if !c.Claimed {
		t.Fatalf("claim of %s: not claimed: %+v", req.ID, c.Record)
	}
	ok, err := c.Claim.Complete(context.Background(), SampleResult())
	MustOK(t, "Complete "+req.ID, ok, err)
	return MustGet(t, e, req.ID)
}

// waitGone waits until record id, completed at completedAt with ttl, is
// gone: past that on the engine's clock, and then at most 3s more (an
// engine may stamp a completion with its estimate of its clock, a little
// before the moment the lifetime starts).
func waitGone(t *testing.T, h Harness, e store.Engine, id string, completedAt time.Time, ttl time.Duration) {
	t.Helper()
	WaitPast(t, h, e, completedAt.Add(ttl))
	for range 300 {
		r, err := e.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		if r == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("record %s is still there 3s after its TTL", id)
}

// claimOnceGone claims req once the tombstone or twin entry that refuses
// it has expired: past until on the engine's clock, then at most 3s more
// of claims, each refused without creating anything (as waitGone).
func claimOnceGone(t *testing.T, h Harness, e store.Engine, req store.ClaimRequest, until time.Time) store.ClaimResult {
	t.Helper()
	WaitPast(t, h, e, until)
	for range 300 {
		if res := claimOf(t, e, req); res.Record != nil {
			return res
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("claim of %s still refused 3s after %v", req.ID, until)
	return store.ClaimResult{}
}

func wantTombstone(t *testing.T, what string, got *store.Tombstone, rec *store.Record) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: no tombstone reported, want the one of %s", what, rec.ID)
	}
	if got.ID != rec.ID || !got.CompletedAt.Equal(rec.CompletedAt) || got.Status != rec.Status || got.Reason != rec.Reason {
		t.Fatalf("%s: tombstone %+v, want id %s completed at %v status %d reason %q",
			what, *got, rec.ID, rec.CompletedAt, rec.Status, rec.Reason)
	}
}

func testTombstoneAfterExpiry(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	req := ClaimReq(id, "tok-A")
	req.Tombstone = time.Hour
	done := completedShortly(t, e, req, time.Second)

	// A replay of the live record reports no tombstone.
	live := MustClaim(t, e, ClaimReq(id, "tok-live"))
	if live.Claimed || live.Tombstone != nil || live.Record.State != store.StateCompleted {
		t.Fatalf("replay of the live record: claimed %v, tombstone %+v, state %s", live.Claimed, live.Tombstone, live.Record.State)
	}
	waitGone(t, h, e, id, done.CompletedAt, time.Second)

	reject := ClaimReq(id, "tok-late-1")
	reject.AfterExpiry = store.AfterExpiryReject
	res := claimOf(t, e, reject)
	if res.Claimed || res.Record != nil {
		t.Fatalf("claim under reject after expiry: claimed %v, record %+v; want nothing claimed or created", res.Claimed, res.Record)
	}
	wantTombstone(t, "claim under reject", res.Tombstone, done)
	if r, err := e.Get(context.Background(), id); err != nil || r != nil {
		t.Fatalf("Get after a rejected late claim: %+v, %v; want nil, nil (nothing created)", r, err)
	}

	execute := ClaimReq(id, "tok-late-2")
	execute.AfterExpiry, execute.Tombstone = store.AfterExpiryExecute, time.Hour // its route keeps tombstones
	res = MustClaim(t, e, execute)
	if !res.Claimed || res.Record.State != store.StateInFlight || res.Record.Attempts != 1 || res.Record.Executions != 1 {
		t.Fatalf("claim under execute after expiry: claimed %v, record %+v; want a new claim", res.Claimed, res.Record)
	}
	wantTombstone(t, "claim under execute", res.Tombstone, done)

	// The new record is live: a duplicate ignores the tombstone.
	dup := MustClaim(t, e, reject)
	if dup.Claimed || dup.Tombstone != nil || dup.Record.Token != "tok-late-2" {
		t.Fatalf("duplicate of the new claim: claimed %v, tombstone %+v, record %+v", dup.Claimed, dup.Tombstone, dup.Record)
	}
}

func testNoTombstone(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	done := completedShortly(t, e, ClaimReq(id, "tok-A"), time.Second)
	waitGone(t, h, e, id, done.CompletedAt, time.Second)
	req := ClaimReq(id, "tok-B")
	req.AfterExpiry = store.AfterExpiryReject
	res := MustClaim(t, e, req)
	if !res.Claimed || res.Tombstone != nil {
		t.Fatalf("claim after a record without tombstone expired: claimed %v, tombstone %+v; want claimed, none", res.Claimed, res.Tombstone)
	}
	// A first delivery, and a record held then gone, report none either.
	fresh := MustClaim(t, e, func() store.ClaimRequest {
		r := ClaimReq(NewID(t), "tok-C")
		r.AfterExpiry = store.AfterExpiryReject
		return r
	}())
	if !fresh.Claimed || fresh.Tombstone != nil {
		t.Fatalf("first claim: claimed %v, tombstone %+v", fresh.Claimed, fresh.Tombstone)
	}
}

// expiredWithTombstone completes a new record living 1s that leaves a
// tombstone of tomb, and waits until the record is gone.
func expiredWithTombstone(t *testing.T, h Harness, e store.Engine, tomb time.Duration) *store.Record {
	t.Helper()
	req := ClaimReq(NewID(t), "tok-A")
	req.Tombstone = tomb
	done := completedShortly(t, e, req, time.Second)
	waitGone(t, h, e, done.ID, done.CompletedAt, time.Second)
	return done
}

func testTombstoneExpires(t *testing.T, h Harness, e store.Engine) {
	// The tombstone outlives the record by its own lifetime, then goes.
	done := expiredWithTombstone(t, h, e, time.Second)
	id := done.ID
	late := ClaimReq(id, "tok-B")
	late.AfterExpiry = store.AfterExpiryReject
	if res := claimOf(t, e, late); res.Claimed || res.Tombstone == nil {
		t.Fatalf("claim once the record expired: claimed %v, tombstone %+v; want the tombstone", res.Claimed, res.Tombstone)
	}
	res := claimOnceGone(t, h, e, late, done.CompletedAt.Add(2*time.Second))
	if !res.Claimed || res.Tombstone != nil {
		t.Fatalf("claim after the tombstone expired: claimed %v, tombstone %+v; want claimed, none", res.Claimed, res.Tombstone)
	}
}

// testTombstoneOutlivesAClaimAnew: a record claimed anew after its
// tombstone was found, and released rather than completed, leaves no
// tombstone of its own: once it expires, a late claim still finds the
// earlier completion's.
func testTombstoneOutlivesAClaimAnew(t *testing.T, h Harness, e store.Engine) {
	done := expiredWithTombstone(t, h, e, time.Hour)
	id := done.ID

	again := ClaimReq(id, "tok-B")
	again.Tombstone, again.TTL = time.Hour, time.Second // released for a second
	res := MustClaim(t, e, again)
	if !res.Claimed {
		t.Fatalf("claim after expiry: not claimed: %+v", res.Record)
	}
	wantTombstone(t, "claim after expiry", res.Tombstone, done)
	ok, err := res.Claim.Release(context.Background())
	MustOK(t, "Release", ok, err)
	waitGone(t, h, e, id, h.Now(t, e), time.Second)

	late := ClaimReq(id, "tok-C")
	late.AfterExpiry = store.AfterExpiryReject
	res = claimOf(t, e, late)
	if res.Claimed || res.Record != nil {
		t.Fatalf("claim under reject once the released record expired: claimed %v, record %+v; want nothing", res.Claimed, res.Record)
	}
	wantTombstone(t, "claim under reject once the released record expired", res.Tombstone, done)
}

func testTombstoneOfCheckAndOperator(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	// A record a check completes leaves the check's tombstone.
	checked := heldWithCheck(t, e, time.Hour)
	mustBegin(t, e, checked, "tok-A", "chk-1", false)
	o := outcome(checked, "chk-1", store.VerdictApplied, 200)
	o.Result, o.TTL, o.Tombstone = SampleResult(), time.Second, time.Hour
	verified := mustEnd(t, e, o)
	if verified.State != store.StateCompleted || verified.Reason != store.ReasonVerified {
		t.Fatalf("applied check: %+v", verified)
	}

	// An operator's completion leaves one of DefaultTombstone.
	byHand := NewID(t)
	if c := MustClaim(t, e, ClaimReq(byHand, "tok-1")); !c.Claimed {
		t.Fatal("claim of the operator's record")
	}
	ok, err := e.MarkUnknown(ctx, byHand, "tok-1", "upstream_timeout", time.Hour)
	MustOK(t, "MarkUnknown", ok, err)
	completed, err := e.OperatorComplete(ctx, byHand, SampleResult(), store.Action{Actor: "ops", Reason: "seen upstream"}, time.Second)
	if err != nil {
		t.Fatalf("OperatorComplete: %v", err)
	}

	// An operator's release of a completed record drops its tombstone:
	// the operation is known not to have taken effect.
	undone := NewID(t)
	req := ClaimReq(undone, "tok-A")
	req.Tombstone = time.Hour
	completedShortly(t, e, req, time.Hour)
	released, err := e.OperatorRelease(ctx, undone, store.Action{Actor: "ops", Reason: "refunded by hand"}, time.Second)
	if err != nil {
		t.Fatalf("OperatorRelease: %v", err)
	}

	waitGone(t, h, e, verified.ID, verified.CompletedAt, time.Second)
	waitGone(t, h, e, completed.ID, completed.CompletedAt, time.Second)
	waitGone(t, h, e, released.ID, h.Now(t, e), time.Second)
	for _, c := range []struct {
		rec  *store.Record
		want bool
	}{{verified, true}, {completed, true}, {released, false}} {
		late := ClaimReq(c.rec.ID, "tok-late")
		late.AfterExpiry = store.AfterExpiryReject
		res := claimOf(t, e, late)
		if !c.want {
			if !res.Claimed || res.Tombstone != nil {
				t.Fatalf("late claim of the record an operator released: claimed %v, tombstone %+v; want claimed, none", res.Claimed, res.Tombstone)
			}
			continue
		}
		if res.Claimed || res.Record != nil {
			t.Fatalf("late claim of %s (reason %q) under reject: claimed %v, record %+v", c.rec.ID, c.rec.Reason, res.Claimed, res.Record)
		}
		wantTombstone(t, "late claim of a record completed with reason "+c.rec.Reason, res.Tombstone, c.rec)
	}
}

// twinReq is a claim of id with the twin digest twin under action.
func twinReq(id, token, twin string, action store.TwinAction) store.ClaimRequest {
	r := ClaimReq(id, token)
	r.Twin, r.OnTwin, r.TwinWindow = twin, action, time.Hour
	return r
}

func wantTwin(t *testing.T, what string, got *store.Twin, rec *store.Record) {
	t.Helper()
	if got == nil || got.ID != rec.ID || !got.CompletedAt.Equal(rec.CompletedAt) {
		t.Fatalf("%s: twin %+v, want %s completed at %v", what, got, rec.ID, rec.CompletedAt)
	}
}

func testTwin(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	twin := NewID(t)
	a := NewID(t)
	doneA := completedShortly(t, e, twinReq(a, "tok-A", twin, store.TwinWarn), time.Second)

	// Another key, same payload: warned, claimed.
	b := NewID(t)
	res := MustClaim(t, e, twinReq(b, "tok-B", twin, store.TwinWarn))
	if !res.Claimed || res.Record.State != store.StateInFlight {
		t.Fatalf("claim of B under warn: claimed %v, record %+v", res.Claimed, res.Record)
	}
	wantTwin(t, "claim of B under warn", res.Twin, doneA)

	// Held: the record is created as outcome unknown, not executed.
	c := NewID(t)
	res = MustClaim(t, e, twinReq(c, "tok-C", twin, store.TwinHold))
	if res.Claimed || res.Record.State != store.StateUnknown || res.Record.Reason != store.ReasonSamePayload ||
		res.Record.Executions != 0 || res.Record.Attempts != 1 {
		t.Fatalf("claim of C under hold: claimed %v, record %+v; want held with reason %s, 0 executions",
			res.Claimed, res.Record, store.ReasonSamePayload)
	}
	wantTwin(t, "claim of C under hold", res.Twin, doneA)
	held := MustGet(t, e, c)
	if held.State != store.StateUnknown || held.Reason != store.ReasonSamePayload || held.Executions != 0 || !held.Check.IsZero() {
		t.Fatalf("Get of the held C: %+v", held)
	}
	CheckTTL(t, h, e, c, 720*time.Hour)
	// Its retry finds the record: held, no twin reported.
	again := MustClaim(t, e, twinReq(c, "tok-C2", twin, store.TwinHold))
	if again.Claimed || again.Twin != nil || again.Record.State != store.StateUnknown || again.Record.Attempts != 2 {
		t.Fatalf("retry of the held C: claimed %v, twin %+v, record %+v", again.Claimed, again.Twin, again.Record)
	}
	// An operator releases it; the next retry executes.
	if _, err := e.OperatorRelease(ctx, c, store.Action{Actor: "ops", Reason: "a second order indeed"}, time.Hour); err != nil {
		t.Fatalf("OperatorRelease of the held C: %v", err)
	}
	taken := MustClaim(t, e, twinReq(c, "tok-C3", twin, store.TwinHold))
	if !taken.Claimed || !taken.TakeOver || taken.Twin != nil || taken.Record.Executions != 1 {
		t.Fatalf("retry of C after the operator's release: claimed %v, takeover %v, twin %+v, record %+v",
			taken.Claimed, taken.TakeOver, taken.Twin, taken.Record)
	}

	// Rejected: nothing is created.
	d := NewID(t)
	res = claimOf(t, e, twinReq(d, "tok-D", twin, store.TwinReject))
	if res.Claimed || res.Record != nil {
		t.Fatalf("claim of D under reject: claimed %v, record %+v; want nothing", res.Claimed, res.Record)
	}
	wantTwin(t, "claim of D under reject", res.Twin, doneA)
	if r, err := e.Get(ctx, d); err != nil || r != nil {
		t.Fatalf("Get(D) after the rejected claim: %+v, %v; want nil, nil", r, err)
	}

	// The detector off: no twin.
	off := MustClaim(t, e, twinReq(NewID(t), "tok-E", "", store.TwinReject))
	if !off.Claimed || off.Twin != nil {
		t.Fatalf("claim without a twin digest: claimed %v, twin %+v", off.Claimed, off.Twin)
	}

	// A retry of A itself, live or gone, is never its own twin.
	replay := MustClaim(t, e, twinReq(a, "tok-A2", twin, store.TwinReject))
	if replay.Claimed || replay.Twin != nil || replay.Record.State != store.StateCompleted {
		t.Fatalf("replay of A: claimed %v, twin %+v, record %+v", replay.Claimed, replay.Twin, replay.Record)
	}
	waitGone(t, h, e, a, doneA.CompletedAt, time.Second)
	late := MustClaim(t, e, twinReq(a, "tok-A3", twin, store.TwinReject))
	if !late.Claimed || late.Twin != nil {
		t.Fatalf("late retry of A: claimed %v, twin %+v; want claimed, no twin", late.Claimed, late.Twin)
	}

	// B's completion makes the entry name B.
	ok, err := e.Complete(ctx, store.CompleteRequest{Claim: twinReq(b, "tok-B", twin, store.TwinWarn), Result: SampleResult(),
		TTL: time.Hour, Twin: twin, TwinWindow: time.Hour})
	MustOK(t, "Complete B", ok, err)
	doneB := MustGet(t, e, b)
	res = MustClaim(t, e, twinReq(NewID(t), "tok-F", twin, store.TwinWarn))
	wantTwin(t, "claim after B completed", res.Twin, doneB)
}

func testTwinExpires(t *testing.T, h Harness, e store.Engine) {
	twin := NewID(t)
	req := twinReq(NewID(t), "tok-A", twin, store.TwinWarn)
	req.TwinWindow = time.Second
	done := completedShortly(t, e, req, time.Hour)
	b := twinReq(NewID(t), "tok-B", twin, store.TwinReject)
	if res := claimOf(t, e, b); res.Claimed || res.Twin == nil {
		t.Fatalf("claim within the twin window: claimed %v, twin %+v; want the twin", res.Claimed, res.Twin)
	}
	res := claimOnceGone(t, h, e, b, done.CompletedAt.Add(time.Second))
	if !res.Claimed || res.Twin != nil {
		t.Fatalf("claim after the twin window: claimed %v, twin %+v; want claimed, none", res.Claimed, res.Twin)
	}
}

func testRetentionArguments(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	for _, c := range []struct {
		name string
		edit func(*store.ClaimRequest)
		is   error
	}{
		{"twin digest with a brace", func(r *store.ClaimRequest) { r.Twin = "{bad}" }, store.ErrInvalidID},
		{"after expiry later", func(r *store.ClaimRequest) { r.AfterExpiry = "later" }, store.ErrInvalidArgument},
		{"on twin panic", func(r *store.ClaimRequest) { r.OnTwin = "panic" }, store.ErrInvalidArgument},
		{"negative tombstone", func(r *store.ClaimRequest) { r.Tombstone = -time.Second }, store.ErrInvalidArgument},
		{"negative twin window", func(r *store.ClaimRequest) { r.TwinWindow = -time.Second }, store.ErrInvalidArgument},
	} {
		req := ClaimReq(id, "tok-1")
		c.edit(&req)
		if _, err := e.Claim(ctx, req); !errors.Is(err, c.is) {
			t.Errorf("Claim with %s: %v, want %v", c.name, err, c.is)
		}
	}
	if r, err := e.Get(ctx, id); err != nil || r != nil {
		t.Fatalf("refused claims created %+v (%v)", r, err)
	}
	MustClaim(t, e, ClaimReq(id, "tok-1"))
	for _, c := range []struct {
		name string
		edit func(*store.CompleteRequest)
		is   error
	}{
		{"twin digest too long", func(r *store.CompleteRequest) { r.Twin = string(make([]byte, 129)) }, store.ErrInvalidID},
		{"negative tombstone", func(r *store.CompleteRequest) { r.Tombstone = -time.Second }, store.ErrInvalidArgument},
		{"negative twin window", func(r *store.CompleteRequest) { r.TwinWindow = -time.Second }, store.ErrInvalidArgument},
	} {
		req := Completion(id, "tok-1", SampleResult(), time.Hour)
		c.edit(&req)
		if ok, err := e.Complete(ctx, req); ok || !errors.Is(err, c.is) {
			t.Errorf("Complete with %s: %v, %v; want false, %v", c.name, ok, err, c.is)
		}
	}
	if r := MustGet(t, e, id); r.State != store.StateInFlight {
		t.Fatalf("refused completions changed the record: %+v", r)
	}
	held := heldWithCheck(t, e, time.Hour)
	mustBegin(t, e, held, "tok-A", "chk-1", false)
	o := outcome(held, "chk-1", store.VerdictApplied, 200)
	o.Result, o.Tombstone = SampleResult(), -time.Second
	if _, ok, err := e.EndCheck(ctx, o); ok || !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("EndCheck with a negative tombstone: %v, %v; want false, ErrInvalidArgument", ok, err)
	}
}

// CompleteExpiring claims and completes n records (ids "%032x" of 0 to
// n-1) through e's contract, by 64 callers, each living ttl and leaving a
// tombstone of tomb: what the engines' tombstone measurements load.
func CompleteExpiring(tb testing.TB, e store.Engine, n int, res store.Result, ttl, tomb time.Duration) {
	ctx := context.Background()
	ids := make(chan string, n)
	for i := range n {
		ids <- fmt.Sprintf("%032x", i)
	}
	close(ids)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for id := range ids {
				req := ClaimReq(id, store.NewToken())
				req.TTL, req.Tombstone = ttl, tomb
				c, err := e.Claim(ctx, req)
				if err != nil || !c.Claimed {
					tb.Errorf("claim: %+v, %v", c, err)
					return
				}
				if ok, err := c.Claim.Complete(ctx, res); !ok || err != nil {
					tb.Errorf("complete: %v, %v", ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
