package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(
		test{"ReleaseReasons", testReleaseReasons},
		test{"RetryBudgetUnknowns", testRetryBudgetUnknowns},
		test{"VerifiedReleaseClearsUnknowns", testVerifiedReleaseClearsUnknowns},
	)
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
