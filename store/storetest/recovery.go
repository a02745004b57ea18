package storetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(
		test{"RetryBudget", testRetryBudget},
		test{"RetryBudgetFenced", testRetryBudgetFenced},
		test{"KeptRequest", testKeptRequest},
		test{"Redrive", testRedrive},
		test{"RedriveRefused", testRedriveRefused},
		test{"ReleaseReasons", testReleaseReasons},
		test{"RetryBudgetUnknowns", testRetryBudgetUnknowns},
		test{"VerifiedReleaseClearsUnknowns", testVerifiedReleaseClearsUnknowns},
		test{"ExpiredReleaseCounts", testExpiredReleaseCounts},
	)
}

// keptReq is claimReq with a sealed request kept on the record.
func keptReq(id, token string, sealed []byte) store.ClaimRequest {
	req := ClaimReq(id, token)
	req.Request = sealed
	return req
}

// exhaust claims id under max-1 released executions and one more that
// uses up the budget, and returns the held record.
func exhaust(t *testing.T, e store.Engine, id string, max int64, sealed []byte) *store.Record {
	t.Helper()
	ctx := context.Background()
	for i := int64(1); i <= max; i++ {
		res := MustClaim(t, e, keptReq(id, "tok-"+string(rune('A'+i)), sealed))
		if !res.Claimed {
			t.Fatalf("execution %d: not claimed, record %+v", i, res.Record)
		}
		out, err := res.Claim.NotDone(ctx, 503, max)
		want := store.NotDoneReleased
		if i == max {
			want = store.NotDoneExhausted
		}
		if err != nil || out != want {
			t.Fatalf("execution %d: NotDone = %v, %v; want %v", i, out, err, want)
		}
		if r := MustGet(t, e, id); r.NotDone != i || len(r.Answers) != int(i) || r.Answers[i-1].Status != 503 || r.Executions != i {
			t.Fatalf("execution %d: record counts %d not done, %d answers %+v, %d executions", i, r.NotDone, len(r.Answers), r.Answers, r.Executions)
		}
	}
	return MustGet(t, e, id)
}

func testRetryBudget(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	before := h.Now(t, e)
	r := exhaust(t, e, id, 3, nil)
	if r.State != store.StateUnknown || r.Reason != store.ReasonRetriesExhausted || r.Class() != store.StateExhausted ||
		!r.NextCheck.IsZero() || r.Status != 0 {
		t.Fatalf("exhausted record: state %s reason %q class %s next check %v status %d", r.State, r.Reason, r.Class(), r.NextCheck, r.Status)
	}
	for _, a := range r.Answers {
		if a.At.Before(before.Truncate(time.Millisecond)) || a.At.After(h.Now(t, e)) {
			t.Fatalf("answer time %v outside the test (from %v)", a.At, before)
		}
	}
	CheckTTL(t, h, e, id, 720*time.Hour) // held: it lives hold_ttl, not ttl
	checkListed(t, e, id, store.StateUnknown)

	// Nothing executes until an operator acts: claims find the record.
	for range 2 {
		if res := MustClaim(t, e, ClaimReq(id, "tok-late")); res.Claimed || res.Record.Class() != store.StateExhausted {
			t.Fatalf("a claim of an exhausted record: claimed %v, class %s", res.Claimed, res.Record.Class())
		}
	}

	// An operator's release starts the count again; the answers stay.
	rel, err := e.OperatorRelease(context.Background(), id, store.Action{Actor: "alice", Reason: "CRM is back"}, time.Hour)
	if err != nil || rel.State != store.StateReleased || rel.NotDone != 0 || len(rel.Answers) != 3 {
		t.Fatalf("OperatorRelease: %v, %+v", err, rel)
	}
	res := MustClaim(t, e, ClaimReq(id, "tok-again"))
	out, err := res.Claim.NotDone(context.Background(), 429, 3)
	if !res.Claimed || err != nil || out != store.NotDoneReleased {
		t.Fatalf("after a release: claimed %v, NotDone %v %v", res.Claimed, out, err)
	}

	// Only the newest answers are kept; no budget never holds.
	other := NewID(t)
	for i := range store.MaxAnswers + 3 {
		res := MustClaim(t, e, ClaimReq(other, "tok-"+strings.Repeat("x", i+1)))
		out, err := res.Claim.NotDone(context.Background(), 500+i, 0)
		if err != nil || out != store.NotDoneReleased {
			t.Fatalf("no budget, execution %d: %v %v", i, out, err)
		}
	}
	o := MustGet(t, e, other)
	if o.NotDone != store.MaxAnswers+3 || len(o.Answers) != store.MaxAnswers || o.Answers[0].Status != 503 || o.Answers[store.MaxAnswers-1].Status != 512 {
		t.Fatalf("answers kept: %d not done, %+v", o.NotDone, o.Answers)
	}
}

func testRetryBudgetFenced(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	MustClaim(t, e, ClaimReq(id, "tok-A"))
	before := MustGet(t, e, id)
	out, err := e.NotDone(ctx, store.NotDoneRequest{ID: id, Token: "tok-other", Status: 503, MaxExecutions: 1})
	if err != nil || out != store.NotDoneLost {
		t.Fatalf("NotDone with another token: %v, %v", out, err)
	}
	if after := MustGet(t, e, id); after.State != before.State || after.NotDone != 0 || after.Answers != nil {
		t.Fatalf("fenced NotDone changed the record: %+v", after)
	}
	if out, err := e.NotDone(ctx, store.NotDoneRequest{ID: NewID(t), Token: "tok-A"}); err != nil || out != store.NotDoneLost {
		t.Fatalf("NotDone of no record: %v, %v", out, err)
	}
	if _, err := e.NotDone(ctx, store.NotDoneRequest{ID: "bad id", Token: "t"}); !errors.Is(err, store.ErrInvalidID) {
		t.Fatalf("NotDone with a bad id: %v", err)
	}
}

func testKeptRequest(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	sealed := []byte("\x00sealed:\r\n\xffbytes")
	res := MustClaim(t, e, keptReq(id, "tok-A", sealed))
	if r := MustGet(t, e, id); !bytes.Equal(r.Request, sealed) {
		t.Fatalf("kept request %q, want %q", r.Request, sealed)
	}
	ok, err := res.Claim.Release(ctx)
	MustOK(t, "Release", ok, err)
	if r := MustGet(t, e, id); !bytes.Equal(r.Request, sealed) {
		t.Fatalf("a release dropped the request: %q", r.Request)
	}
	// A takeover keeps the retry's request.
	newer := []byte("newer")
	res = MustClaim(t, e, keptReq(id, "tok-B", newer))
	if !res.Claimed || !bytes.Equal(MustGet(t, e, id).Request, newer) {
		t.Fatalf("takeover: claimed %v, request %q", res.Claimed, MustGet(t, e, id).Request)
	}
	ok, err = res.Claim.Complete(ctx, SampleResult())
	MustOK(t, "Complete", ok, err)
	if r := MustGet(t, e, id); r.Request != nil || r.State != store.StateCompleted || r.Status != 201 {
		t.Fatalf("completed: request %q, state %s", r.Request, r.State)
	}

	// An operator's completion drops it too.
	held := NewID(t)
	res = MustClaim(t, e, keptReq(held, "tok-A", sealed))
	ok, err = res.Claim.MarkUnknown(ctx, "upstream_5xx")
	MustOK(t, "MarkUnknown", ok, err)
	if r := MustGet(t, e, held); !bytes.Equal(r.Request, sealed) {
		t.Fatalf("a hold dropped the request: %q", r.Request)
	}
	r, err := e.OperatorComplete(ctx, held, SampleResult(), store.Action{Actor: "alice"}, time.Hour)
	if err != nil || r.Request != nil || MustGet(t, e, held).Request != nil {
		t.Fatalf("OperatorComplete: %v, request kept: %q", err, MustGet(t, e, held).Request)
	}
}

func testRedrive(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	sealed := []byte("sealed request")
	exhaust(t, e, id, 2, sealed)
	act := store.Action{Actor: "alice", Reason: "the CRM is back"}
	req := store.RedriveRequest{ID: id, Token: "tok-run", Lease: 30 * time.Second, HoldTTL: 720 * time.Hour, Act: act}
	before := h.Now(t, e)
	r, err := e.Redrive(ctx, req)
	if err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	if r.State != store.StateInFlight || r.Token != "tok-run" || r.Executions != 3 || r.Reason != "" ||
		!bytes.Equal(r.Request, sealed) || r.StartedAt.Before(before.Truncate(time.Millisecond)) ||
		!r.LeaseUntil.Equal(r.StartedAt.Add(30*time.Second)) {
		t.Fatalf("redriven record: %+v", r)
	}
	if n := len(r.Audit); n != 1 || r.Audit[0].Action != store.AuditRun || r.Audit[0].Actor != "alice" || r.Audit[0].Reason != act.Reason {
		t.Fatalf("audit: %+v", r.Audit)
	}
	if got := MustGet(t, e, id); got.State != store.StateInFlight || got.Token != "tok-run" {
		t.Fatalf("stored: %+v", got)
	}
	checkListed(t, e, id, store.StateInFlight)
	// A second run while the first is live is refused.
	if _, err := e.Redrive(ctx, store.RedriveRequest{ID: id, Token: "tok-2", Act: act}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Redrive of a live run: %v", err)
	}
	// The old claims are fenced out.
	checkFencedOut(t, e, id, "tok-C")

	// A run that fails again is held again at once (the budget is used).
	c := store.ClaimFor(e, r, req, time.Hour)
	if out, err := c.NotDone(ctx, 503, 2); err != nil || out != store.NotDoneExhausted {
		t.Fatalf("the run's NotDone: %v %v", out, err)
	}
	// The next run succeeds: retries replay it, and the request is gone.
	req.Token = "tok-run-2"
	r, err = e.Redrive(ctx, req)
	if err != nil {
		t.Fatalf("second Redrive: %v", err)
	}
	ok, err := store.ClaimFor(e, r, req, time.Hour).Complete(ctx, SampleResult())
	MustOK(t, "Complete of the run", ok, err)
	got := MustGet(t, e, id)
	if got.State != store.StateCompleted || got.Status != 201 || got.Request != nil || got.Executions != 4 || len(got.Audit) != 2 {
		t.Fatalf("after the run: %+v", got)
	}
	if res := MustClaim(t, e, ClaimReq(id, "tok-retry")); res.Claimed || res.Record.Status != 201 {
		t.Fatalf("the client's retry: claimed %v, status %d", res.Claimed, res.Record.Status)
	}

	// A record that an operator released may be run too.
	rel := NewID(t)
	res := MustClaim(t, e, keptReq(rel, "tok-A", sealed))
	ok, err = res.Claim.MarkUnknown(ctx, "upstream_timeout")
	MustOK(t, "MarkUnknown", ok, err)
	if _, err := e.OperatorRelease(ctx, rel, act, time.Hour); err != nil {
		t.Fatal(err)
	}
	if r, err := e.Redrive(ctx, store.RedriveRequest{ID: rel, Token: "tok-run", Act: act}); err != nil || r.State != store.StateInFlight {
		t.Fatalf("Redrive of a released record: %v", err)
	}
}

func testRedriveRefused(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	act := store.Action{Actor: "alice", Reason: "why"}
	sealed := []byte("sealed")
	run := func(id string) (*store.Record, error) {
		return e.Redrive(ctx, store.RedriveRequest{ID: id, Token: "tok-run", Act: act})
	}

	unknown := NewID(t)
	res := MustClaim(t, e, keptReq(unknown, "tok-A", sealed))
	ok, err := res.Claim.MarkUnknown(ctx, "upstream_timeout")
	MustOK(t, "MarkUnknown", ok, err)
	before := MustGet(t, e, unknown)
	r, err := run(unknown)
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "held as outcome unknown") || r == nil || r.State != store.StateUnknown {
		t.Fatalf("Redrive of an outcome-unknown record: %v, %+v", err, r)
	}
	if after := MustGet(t, e, unknown); after.State != before.State || after.Token != before.Token || len(after.Audit) != 0 {
		t.Fatalf("a refused run changed the record: %+v", after)
	}

	live := NewID(t)
	MustClaim(t, e, keptReq(live, "tok-A", sealed))
	if _, err := run(live); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "in flight") {
		t.Fatalf("Redrive of a live claim: %v", err)
	}

	done := NewID(t)
	res = MustClaim(t, e, keptReq(done, "tok-A", sealed))
	ok, err = res.Claim.Complete(ctx, SampleResult())
	MustOK(t, "Complete", ok, err)
	if _, err := run(done); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "already completed") {
		t.Fatalf("Redrive of a completed record: %v", err)
	}

	bare := NewID(t)
	res = MustClaim(t, e, ClaimReq(bare, "tok-A"))
	if _, err := res.Claim.NotDone(ctx, 503, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := run(bare); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "kept no request") {
		t.Fatalf("Redrive without a kept request: %v", err)
	}

	if _, err := run(NewID(t)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Redrive of no record: %v", err)
	}
	if _, err := e.Redrive(ctx, store.RedriveRequest{ID: bare, Token: "t"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("Redrive without an actor: %v", err)
	}
	if _, err := e.Redrive(ctx, store.RedriveRequest{ID: bare, Act: act}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("Redrive without a token: %v", err)
	}
}

// redriveRefused asserts that a re-drive of id is refused because the
// upstream may have acted, and that the refusal changed nothing.
func redriveRefused(t *testing.T, e store.Engine, id, what string) {
	t.Helper()
	before := MustGet(t, e, id)
	if store.KnownNotDone(before) {
		t.Fatalf("%s: KnownNotDone of %+v", what, before)
	}
	r, err := e.Redrive(context.Background(), store.RedriveRequest{ID: id, Token: "tok-run", Act: store.Action{Actor: "alice", Reason: "run it"}})
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "may have acted") || r == nil {
		t.Fatalf("%s: Redrive = %v, %+v; want a conflict saying the upstream may have acted", what, err, r)
	}
	if after := MustGet(t, e, id); after.State != before.State || after.Token != before.Token || len(after.Audit) != len(before.Audit) ||
		after.Executions != before.Executions {
		t.Fatalf("%s: a refused run changed the record: %+v", what, after)
	}
}

// redriveAllowed asserts that a re-drive of id claims it.
func redriveAllowed(t *testing.T, e store.Engine, id, what string) {
	t.Helper()
	if rec := MustGet(t, e, id); !store.KnownNotDone(rec) {
		t.Fatalf("%s: not KnownNotDone: %+v", what, rec)
	}
	r, err := e.Redrive(context.Background(), store.RedriveRequest{ID: id, Token: "tok-run", Act: store.Action{Actor: "alice", Reason: "run it"}})
	if err != nil || r.State != store.StateInFlight || r.Token != "tok-run" {
		t.Fatalf("%s: Redrive = %v, %+v", what, err, r)
	}
}

// TestReleaseReasons: every release says why; a re-drive is allowed only
// where the operation is known not done.
func testReleaseReasons(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	sealed := []byte("sealed")

	// "Not done": known not done.
	notDone := NewID(t)
	res := MustClaim(t, e, keptReq(notDone, "tok-A", sealed))
	if out, err := res.Claim.NotDone(ctx, 503, 0); err != nil || out != store.NotDoneReleased {
		t.Fatalf("NotDone: %v %v", out, err)
	}
	if r := MustGet(t, e, notDone); r.State != store.StateReleased || r.Reason != store.ReasonNotDone || r.Unknowns != 0 {
		t.Fatalf("released \"not done\": state %s reason %q unknowns %d", r.State, r.Reason, r.Unknowns)
	}
	redriveAllowed(t, e, notDone, "released \"not done\"")

	// A plain release: the attempt had no effect.
	plain := NewID(t)
	res = MustClaim(t, e, keptReq(plain, "tok-A", sealed))
	ok, err := res.Claim.Release(ctx)
	MustOK(t, "Release", ok, err)
	if r := MustGet(t, e, plain); r.State != store.StateReleased || r.Reason != store.ReasonNotDone {
		t.Fatalf("released: state %s reason %q", r.State, r.Reason)
	}

	// An unknown outcome let go: the upstream may have acted.
	letGo := NewID(t)
	res = MustClaim(t, e, keptReq(letGo, "tok-A", sealed))
	if out, err := res.Claim.LetGo(ctx, 500, 0); err != nil || out != store.NotDoneReleased {
		t.Fatalf("LetGo: %v %v", out, err)
	}
	r := MustGet(t, e, letGo)
	if r.State != store.StateReleased || r.Reason != store.ReasonUnknownReleased || r.NotDone != 1 || r.Unknowns != 1 ||
		len(r.Answers) != 1 || r.Answers[0].Status != 500 {
		t.Fatalf("let go: %+v", r)
	}
	CheckTTL(t, h, e, letGo, 24*time.Hour)
	checkListed(t, e, letGo, store.StateReleased)
	redriveRefused(t, e, letGo, "released by on_unknown_outcome: release")

	// A later "not done" does not make up for it: an earlier execution
	// may have acted.
	res = MustClaim(t, e, keptReq(letGo, "tok-B", sealed))
	if !res.Claimed {
		t.Fatalf("a retry of a let-go record: not claimed, %+v", res.Record)
	}
	if out, err := res.Claim.NotDone(ctx, 503, 0); err != nil || out != store.NotDoneReleased {
		t.Fatalf("NotDone after a let-go: %v %v", out, err)
	}
	if r := MustGet(t, e, letGo); r.Reason != store.ReasonNotDone || r.NotDone != 2 || r.Unknowns != 1 {
		t.Fatalf("\"not done\" after a let-go: reason %q, %d not done, %d unknowns", r.Reason, r.NotDone, r.Unknowns)
	}
	redriveRefused(t, e, letGo, "\"not done\" after an unknown outcome let go")

	// An operator's release: the operator's word.
	rel, err := e.OperatorRelease(ctx, letGo, store.Action{Actor: "alice", Reason: "checked the CRM: no deal"}, time.Hour)
	if err != nil || rel.Reason != store.ReasonOperator || rel.NotDone != 0 || rel.Unknowns != 0 {
		t.Fatalf("OperatorRelease: %v, %+v", err, rel)
	}
	redriveAllowed(t, e, letGo, "released by an operator")
}

// TestRetryBudgetUnknowns: unknown outcomes let go count against the
// budget like "not done" answers; a budget used up partly by them holds
// the record as retries exhausted, but a re-drive is refused until an
// operator releases it.
func testRetryBudgetUnknowns(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	sealed := []byte("sealed")
	steps := []struct {
		unknown bool
		want    store.NotDoneOutcome
	}{{true, store.NotDoneReleased}, {false, store.NotDoneReleased}, {true, store.NotDoneExhausted}}
	for i, s := range steps {
		res := MustClaim(t, e, keptReq(id, "tok-"+string(rune('A'+i)), sealed))
		if !res.Claimed {
			t.Fatalf("execution %d: not claimed, %+v", i+1, res.Record)
		}
		notDone := res.Claim.NotDone
		if s.unknown {
			notDone = res.Claim.LetGo
		}
		if out, err := notDone(ctx, 502, 3); err != nil || out != s.want {
			t.Fatalf("execution %d (unknown %v): %v %v, want %v", i+1, s.unknown, out, err, s.want)
		}
	}
	r := MustGet(t, e, id)
	if r.Class() != store.StateExhausted || r.NotDone != 3 || r.Unknowns != 2 || r.Executions != 3 || len(r.Answers) != 3 {
		t.Fatalf("exhausted: class %s, %d not done, %d unknowns, %d executions, answers %+v", r.Class(), r.NotDone, r.Unknowns, r.Executions, r.Answers)
	}
	CheckTTL(t, h, e, id, 720*time.Hour)
	if res := MustClaim(t, e, ClaimReq(id, "tok-late")); res.Claimed || res.Record.Class() != store.StateExhausted {
		t.Fatalf("a claim of the exhausted record: claimed %v, class %s", res.Claimed, res.Record.Class())
	}
	redriveRefused(t, e, id, "retries exhausted partly by unknown outcomes")
	if _, err := e.OperatorRelease(ctx, id, store.Action{Actor: "alice", Reason: "no deal in the CRM"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	redriveAllowed(t, e, id, "released by an operator after the budget")
}

// TestVerifiedReleaseClearsUnknowns: a verification that finds the
// operation not applied releases the record as known not done, whatever
// unknown outcomes were let go before.
func testVerifiedReleaseClearsUnknowns(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	req := keptReq(id, "tok-0", []byte("sealed"))
	req.Check = crmCheck
	res := MustClaim(t, e, req)
	if out, err := res.Claim.LetGo(ctx, 500, 0); err != nil || out != store.NotDoneReleased {
		t.Fatalf("LetGo: %v %v", out, err)
	}
	req.Token = "tok-A"
	res = MustClaim(t, e, req)
	ok, err := res.Claim.MarkUnknown(ctx, "upstream_timeout")
	MustOK(t, "MarkUnknown", ok, err)
	redriveRefused(t, e, id, "held as outcome unknown")
	mustBegin(t, e, id, "tok-A", "chk-1", false)
	o := outcome(id, "chk-1", store.VerdictNotApplied, 404)
	o.NotFoundChecks = 1
	r := mustEnd(t, e, o)
	if r.State != store.StateReleased || r.Reason != store.ReasonVerifiedNotApplied || r.Unknowns != 0 {
		t.Fatalf("verified not applied: state %s reason %q unknowns %d", r.State, r.Reason, r.Unknowns)
	}
	redriveAllowed(t, e, id, "released by verification")
}

// TestExpiredReleaseCounts: under ExpiredRelease a call whose lease ran
// out is an unknown outcome let go: the claim that takes it over counts
// it against the budget, and the one that would use the budget up holds
// the record as retries exhausted instead of executing.
func testExpiredReleaseCounts(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	req := keptReq(id, "tok-A", []byte("sealed"))
	req.Lease, req.OnExpired, req.MaxExecutions = 300*time.Millisecond, store.ExpiredRelease, 2
	first := MustClaim(t, e, req)
	WaitPast(t, h, e, first.Record.LeaseUntil)

	req.Token = "tok-B"
	taken := MustClaim(t, e, req)
	if !taken.Claimed || !taken.TakeOver || taken.Record.NotDone != 1 || taken.Record.Unknowns != 1 || taken.Record.Executions != 2 {
		t.Fatalf("takeover after a lease ran out: claimed %v, record %+v", taken.Claimed, taken.Record)
	}
	WaitPast(t, h, e, taken.Record.LeaseUntil)

	req.Token = "tok-C"
	res := MustClaim(t, e, req)
	r := MustGet(t, e, id)
	if res.Claimed || res.Record.Class() != store.StateExhausted || r.Class() != store.StateExhausted ||
		r.NotDone != 2 || r.Unknowns != 2 || r.Executions != 2 {
		t.Fatalf("a claim that uses the budget up: claimed %v, record %+v", res.Claimed, r)
	}
	CheckTTL(t, h, e, id, 720*time.Hour)
	redriveRefused(t, e, id, "retries exhausted by leases that ran out")
}
