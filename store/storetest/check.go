package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(
		test{"ClaimKeepsCheck", testClaimKeepsCheck},
		test{"LeaseExpiryMakesCheckDue", testLeaseExpiryMakesCheckDue},
		test{"BeginCheckFences", testBeginCheckFences},
		test{"CheckLease", testCheckLease},
		test{"EndCheckApplied", testEndCheckApplied},
		test{"EndCheckNotApplied", testEndCheckNotApplied},
		test{"EndCheckSchedules", testEndCheckSchedules},
		test{"LateCheckChangesNothing", testLateCheckChangesNothing},
		test{"OneCheckAtATime", testOneCheckAtATime},
		test{"OperatorCheckAudited", testOperatorCheckAudited},
		test{"CheckArguments", testCheckArguments},
		test{"OperatorRefusedDuringCheck", testOperatorRefusedDuringCheck},
	)
}

// crmCheck is the resolved lookup of the example CRM's deals by key,
// with the values the answer must hold.
var crmCheck = store.Check{Method: "GET", URL: "http://127.0.0.1:9001/crm/deals?source_key=evt_184", After: 2 * time.Second,
	Match: []store.CheckMatch{{Path: "0.source_key", Value: "evt_184"}, {Path: `0.note`, Value: "a \"quoted\"\nline, ünïcode"}}}

// heldWithCheck claims a record with crmCheck (after as given) and holds
// it as outcome unknown under tok-A.
func heldWithCheck(t *testing.T, e store.Engine, after time.Duration) string {
	t.Helper()
	id := NewID(t)
	req := ClaimReq(id, "tok-A")
	req.Check = crmCheck
	req.Check.After = after
	MustClaim(t, e, req)
	ok, err := e.MarkUnknown(context.Background(), id, "tok-A", "upstream_5xx", time.Hour)
	MustOK(t, "MarkUnknown", ok, err)
	return id
}

// outcome is a check outcome for a record held under tok-A.
func outcome(id, checkToken, verdict string, status int) store.CheckOutcome {
	return store.CheckOutcome{
		ID: id, ClaimToken: "tok-A", CheckToken: checkToken,
		CheckReport: store.CheckReport{
			Entry:          store.CheckEntry{Status: status, Verdict: verdict},
			NotFoundChecks: 2, Every: 10 * time.Second, Next: 10 * time.Second, TTL: time.Hour,
		},
	}
}

func mustBegin(t *testing.T, e store.Engine, id, claimToken, checkToken string, due bool) *store.Record {
	t.Helper()
	rec, ok, err := e.BeginCheck(context.Background(), id, claimToken, checkToken, 5*time.Second, due)
	if err != nil || !ok {
		t.Fatalf("BeginCheck(%s, %s, due %v) = %v, %v; want the lease", id, checkToken, due, ok, err)
	}
	return rec
}

func mustNotBegin(t *testing.T, e store.Engine, id, claimToken, checkToken string, due bool) *store.Record {
	t.Helper()
	rec, ok, err := e.BeginCheck(context.Background(), id, claimToken, checkToken, 5*time.Second, due)
	if err != nil || ok {
		t.Fatalf("BeginCheck(%s, %s, due %v) = %v, %v; want refused", id, checkToken, due, ok, err)
	}
	return rec
}

func mustEnd(t *testing.T, e store.Engine, o store.CheckOutcome) *store.Record {
	t.Helper()
	rec, ok, err := e.EndCheck(context.Background(), o)
	if err != nil || !ok {
		t.Fatalf("EndCheck(%s, %s) = %v, %v; want recorded", o.CheckToken, o.Entry.Verdict, ok, err)
	}
	return rec
}

// TestClaimKeepsCheck: the resolved check is kept from the claim on; a
// hold makes the first scheduled check due `after` later; a claim
// without a check writes no verification field at all.
func testClaimKeepsCheck(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	req := ClaimReq(id, "tok-A")
	req.Check = crmCheck
	res := MustClaim(t, e, req)
	if !reflect.DeepEqual(res.Record.Check, crmCheck) {
		t.Errorf("claim reply check = %+v, want %+v", res.Record.Check, crmCheck)
	}
	if got := MustGet(t, e, id); !reflect.DeepEqual(got.Check, crmCheck) || !got.NextCheck.IsZero() {
		t.Errorf("in flight: check %+v, next %v; want %+v and no next check", got.Check, got.NextCheck, crmCheck)
	}
	before := h.Now(t, e)
	ok, err := e.MarkUnknown(ctx, id, "tok-A", "upstream_5xx", time.Hour)
	MustOK(t, "MarkUnknown", ok, err)
	got := MustGet(t, e, id)
	if lo, hi := before.Add(crmCheck.After-time.Second), h.Now(t, e).Add(crmCheck.After); got.NextCheck.Before(lo) || got.NextCheck.After(hi) {
		t.Errorf("held: next check %v, want %v after the hold (%v..%v)", got.NextCheck, crmCheck.After, lo, hi)
	}
	// A check's lease and its end keep the check, match values and all.
	mustBegin(t, e, id, "tok-A", "chk-1", false)
	if r := mustEnd(t, e, outcome(id, "chk-1", store.VerdictInconclusive, 200)); !reflect.DeepEqual(r.Check, crmCheck) {
		t.Errorf("after a check: check %+v, want %+v", r.Check, crmCheck)
	}
	if r := MustGet(t, e, id); !reflect.DeepEqual(r.Check, crmCheck) {
		t.Errorf("read after a check: check %+v, want %+v", r.Check, crmCheck)
	}

	plain := NewID(t)
	MustClaim(t, e, ClaimReq(plain, "tok-B"))
	ok, err = e.MarkUnknown(ctx, plain, "tok-B", "upstream_5xx", time.Hour)
	MustOK(t, "MarkUnknown", ok, err)
	if r := MustGet(t, e, plain); !r.Check.IsZero() || !r.NextCheck.IsZero() || r.Checks != nil {
		t.Errorf("a record without a check: %+v", r)
	}
}

// TestLeaseExpiryMakesCheckDue: a claim whose gateway died turns outcome
// unknown at the next claim, due for its first check `after` later.
func testLeaseExpiryMakesCheckDue(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	req := ClaimReq(id, "tok-A")
	req.Lease = 300 * time.Millisecond
	req.Check = crmCheck
	req.Check.After = 0
	WaitPast(t, h, e, MustClaim(t, e, req).Record.LeaseUntil)
	res := MustClaim(t, e, ClaimReq(id, "tok-B"))
	if res.Claimed || res.Record.State != store.StateUnknown || res.Record.Reason != "lease_expired" {
		t.Fatalf("claim after the lease ran out: claimed %v, %s (%s)", res.Claimed, res.Record.State, res.Record.Reason)
	}
	if res.Record.NextCheck.IsZero() || res.Record.NextCheck.After(res.Now) {
		t.Errorf("next check %v, want due at once (now %v)", res.Record.NextCheck, res.Now)
	}
	// The dead claim's token is the one checks are made under.
	mustNotBegin(t, e, id, "tok-B", "chk-1", false)
	mustBegin(t, e, id, "tok-A", "chk-1", true)
}

// TestBeginCheckFences: the lease is taken only on a held record under
// its claim token, one at a time, and when due if asked.
func testBeginCheckFences(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	if rec, ok, err := e.BeginCheck(ctx, NewID(t), "tok-A", "chk-1", time.Second, false); rec != nil || ok || err != nil {
		t.Errorf("absent record: %v, %v, %v", rec, ok, err)
	}
	live := NewID(t)
	req := ClaimReq(live, "tok-A")
	req.Check = crmCheck
	MustClaim(t, e, req)
	mustNotBegin(t, e, live, "tok-A", "chk-1", false)

	id := heldWithCheck(t, e, time.Hour)
	mustNotBegin(t, e, id, "tok-other", "chk-1", false)
	mustNotBegin(t, e, id, "tok-A", "chk-1", true) // not due for an hour
	rec := mustBegin(t, e, id, "tok-A", "chk-1", false)
	if rec.CheckLeaseUntil.IsZero() {
		t.Error("lease taken, CheckLeaseUntil not set")
	}
	mustBegin(t, e, id, "tok-A", "chk-1", false) // a retried BeginCheck
	mustNotBegin(t, e, id, "tok-A", "chk-2", false)

	// A lease that ran out (its gateway died) is taken by the next
	// check; the first can no longer end its check.
	short := heldWithCheck(t, e, 0)
	r, ok, err := e.BeginCheck(ctx, short, "tok-A", "chk-1", 300*time.Millisecond, true)
	MustOK(t, "BeginCheck (due)", ok, err)
	WaitPast(t, h, e, r.CheckLeaseUntil)
	mustBegin(t, e, short, "tok-A", "chk-2", false)
	_, ok, err = e.EndCheck(ctx, outcome(short, "chk-1", store.VerdictNotApplied, 200))
	MustLose(t, "EndCheck by a check whose lease ran out", ok, err)
	mustEnd(t, e, outcome(short, "chk-2", store.VerdictError, 0))
}

// TestCheckLease: the handle the handler holds a check by. A record's
// Held names it as seen; the lease is taken only while the record is so
// held, one at a time, and End records the verdict under it.
func testCheckLease(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := heldWithCheck(t, e, time.Hour)
	rec, err := e.Get(ctx, id)
	if err != nil || rec == nil {
		t.Fatalf("Get: %v, %v", rec, err)
	}
	held := rec.Fence()
	if held.ID() != id || !held.Holds(rec) {
		t.Fatalf("the fence of the held record: id %q, Holds %v", held.ID(), held.Holds(rec))
	}
	lease, got, err := store.BeginCheck(ctx, e, held, 5*time.Second, false)
	if err != nil || lease == nil || got == nil || got.CheckLeaseUntil.IsZero() {
		t.Fatalf("BeginCheck = %v, %+v, %v; want the lease", lease, got, err)
	}
	if other, got, err := store.BeginCheck(ctx, e, held, 5*time.Second, false); other != nil || err != nil || !held.Holds(got) {
		t.Fatalf("second BeginCheck while the lease lives = %v, %v; want refused with the record", other, err)
	}
	after, ok, err := lease.End(ctx, store.CheckReport{
		Entry:          store.CheckEntry{Status: 404, Verdict: store.VerdictNotApplied},
		NotFoundChecks: 1, Every: time.Second, TTL: time.Hour,
	})
	MustOK(t, "End", ok, err)
	if after.State != store.StateReleased || after.Reason != store.ReasonVerifiedNotApplied || held.Holds(after) {
		t.Fatalf("after a not applied verdict with not_found_checks 1: %s %s, still held %v", after.State, after.Reason, held.Holds(after))
	}
	if _, ok, err := lease.End(ctx, store.CheckReport{Entry: store.CheckEntry{Verdict: store.VerdictError}, NotFoundChecks: 1}); ok || err != nil {
		t.Errorf("End again on a released record = %v, %v; want false", ok, err)
	}
	if l, _, err := store.BeginCheck(ctx, e, held, 5*time.Second, false); l != nil || err != nil {
		t.Errorf("BeginCheck on the released record = %v, %v; want refused", l, err)
	}
	if held.Holds(nil) {
		t.Error("Held.Holds(nil) is true")
	}
}

// TestEndCheckApplied: an applied verdict completes the record with the
// lookup's answer, reason verified, external id, under the check token;
// retries replay it and the held claim's late finisher cannot overwrite
// it.
func testEndCheckApplied(t *testing.T, h Harness, e store.Engine) {
	id := heldWithCheck(t, e, time.Hour)
	mustBegin(t, e, id, "tok-A", "chk-1", false)
	o := outcome(id, "chk-1", store.VerdictApplied, 200)
	o.Result = store.Result{
		Status:     201,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       []byte(`[{"id":"D-9021"}]`),
		ExternalID: "D-9021",
	}
	rec := mustEnd(t, e, o)
	if rec.State != store.StateCompleted || rec.Reason != store.ReasonVerified || rec.Status != 201 ||
		string(rec.Body) != `[{"id":"D-9021"}]` || rec.ExternalID != "D-9021" ||
		rec.Header.Get("Content-Type") != "application/json" || rec.Digest == "" || rec.CompletedAt.IsZero() {
		t.Fatalf("applied: %+v", rec)
	}
	if rec.CheckCount != 1 || len(rec.Checks) != 1 || rec.Checks[0].Verdict != store.VerdictApplied || rec.Checks[0].Status != 200 {
		t.Errorf("checks: count %d, %+v", rec.CheckCount, rec.Checks)
	}
	if !rec.NextCheck.IsZero() || !rec.CheckLeaseUntil.IsZero() {
		t.Errorf("next check %v, lease %v after the verdict", rec.NextCheck, rec.CheckLeaseUntil)
	}
	if rec.Executions != 1 {
		t.Errorf("executions %d, want 1", rec.Executions)
	}
	checkListed(t, e, id, store.StateCompleted)
	CheckTTL(t, h, e, id, time.Hour)
	ok, err := complete(e, id, "tok-A", store.Result{Status: 500}, time.Hour)
	MustLose(t, "the held claim's late Complete", ok, err)
	res := MustClaim(t, e, ClaimReq(id, "tok-C"))
	if res.Claimed || res.Record.State != store.StateCompleted || string(res.Record.Body) != `[{"id":"D-9021"}]` {
		t.Errorf("a retry: claimed %v, %s %q", res.Claimed, res.Record.State, res.Record.Body)
	}
	mustNotBegin(t, e, id, "chk-1", "chk-2", false)
}

// TestEndCheckNotApplied: "not applied" releases only after
// not_found_checks counted answers, `every` apart; one early answer is
// recorded but does not count; other verdicts keep the streak.
func testEndCheckNotApplied(t *testing.T, h Harness, e store.Engine) {
	const every = 400 * time.Millisecond
	id := heldWithCheck(t, e, 0)
	end := func(tok, verdict string, status int) *store.Record {
		t.Helper()
		mustBegin(t, e, id, "tok-A", tok, false)
		o := outcome(id, tok, verdict, status)
		o.Every = every
		return mustEnd(t, e, o)
	}
	rec := end("chk-1", store.VerdictNotApplied, 200)
	if rec.State != store.StateUnknown || rec.NotFoundStreak != 1 {
		t.Fatalf("first not applied: %s, streak %d", rec.State, rec.NotFoundStreak)
	}
	first := rec.Checks[0].At
	rec = end("chk-2", store.VerdictNotApplied, 404) // sooner than every: not counted
	if rec.State != store.StateUnknown || rec.NotFoundStreak != 1 || rec.CheckCount != 2 {
		t.Fatalf("early second not applied: %s, streak %d, count %d", rec.State, rec.NotFoundStreak, rec.CheckCount)
	}
	rec = end("chk-3", store.VerdictInconclusive, 500)
	if rec.State != store.StateUnknown || rec.NotFoundStreak != 1 {
		t.Fatalf("inconclusive: %s, streak %d", rec.State, rec.NotFoundStreak)
	}
	WaitPast(t, h, e, first.Add(every))
	rec = end("chk-4", store.VerdictNotApplied, 200)
	if rec.State != store.StateReleased || rec.Reason != store.ReasonVerifiedNotApplied || rec.Token != "chk-4" {
		t.Fatalf("counted second not applied: %s (%s), token %s", rec.State, rec.Reason, rec.Token)
	}
	if rec.CheckCount != 4 || len(rec.Checks) != 4 {
		t.Errorf("checks: count %d, %d entries", rec.CheckCount, len(rec.Checks))
	}
	checkListed(t, e, id, store.StateReleased)
	CheckTTL(t, h, e, id, time.Hour)

	// The next claim executes; the new claim starts its own checks,
	// and the log of the earlier ones stays.
	req := ClaimReq(id, "tok-B")
	req.Check = crmCheck
	res := MustClaim(t, e, req)
	if !res.Claimed || !res.TakeOver || res.Record.Executions != 2 {
		t.Fatalf("retry after the release: claimed %v, takeover %v, executions %d", res.Claimed, res.TakeOver, res.Record.Executions)
	}
	if r := res.Record; r.CheckCount != 0 || r.NotFoundStreak != 0 || !r.NextCheck.IsZero() || len(r.Checks) != 4 || r.Reason != "" {
		t.Errorf("taken over: count %d, streak %d, next %v, %d entries, reason %q", r.CheckCount, r.NotFoundStreak, r.NextCheck, len(r.Checks), r.Reason)
	}
}

// TestEndCheckSchedules: a held verdict sets the next check (Next from
// now) or clears it (Next 0); the log keeps the newest store.MaxCheckEntries.
func testEndCheckSchedules(t *testing.T, h Harness, e store.Engine) {
	id := heldWithCheck(t, e, time.Hour)
	var rec *store.Record
	for i := range store.MaxCheckEntries + 3 {
		tok := fmt.Sprintf("chk-%d", i)
		mustBegin(t, e, id, "tok-A", tok, false)
		o := outcome(id, tok, store.VerdictInconclusive, 500+i%10)
		o.Next = time.Minute
		rec = mustEnd(t, e, o)
	}
	if rec.CheckCount != store.MaxCheckEntries+3 || len(rec.Checks) != store.MaxCheckEntries || rec.Checks[store.MaxCheckEntries-1].Status != 500+(store.MaxCheckEntries+2)%10 {
		t.Errorf("count %d, %d entries, last %+v", rec.CheckCount, len(rec.Checks), rec.Checks[len(rec.Checks)-1])
	}
	if d := rec.NextCheck.Sub(rec.Checks[len(rec.Checks)-1].At); d != time.Minute {
		t.Errorf("next check %v after the last, want 1m", d)
	}
	mustNotBegin(t, e, id, "tok-A", "chk-x", true)
	mustBegin(t, e, id, "tok-A", "chk-last", false)
	o := outcome(id, "chk-last", store.VerdictError, 0)
	o.Next = 0
	if rec = mustEnd(t, e, o); !rec.NextCheck.IsZero() || rec.State != store.StateUnknown {
		t.Errorf("attempts used up: next %v, %s", rec.NextCheck, rec.State)
	}
	checkListed(t, e, id, store.StateUnknown)
	CheckTTL(t, h, e, id, time.Hour)
}

// TestLateCheckChangesNothing: a check that ends after an operator's
// release or completion (made once its check lease had run out: a live
// one refuses them) or a real late result is refused and leaves the
// record as it was.
func testLateCheckChangesNothing(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	for name, resolve := range map[string]func(id string){
		"operator release": func(id string) {
			if _, err := e.OperatorRelease(ctx, id, store.Action{Actor: "alice"}, time.Hour); err != nil {
				t.Fatal(err)
			}
		},
		"operator complete": func(id string) {
			if _, err := e.OperatorComplete(ctx, id, SampleResult(), store.Action{Actor: "alice"}, time.Hour); err != nil {
				t.Fatal(err)
			}
		},
		"late result": func(id string) {
			ok, err := complete(e, id, "tok-A", SampleResult(), time.Hour)
			MustOK(t, "late Complete", ok, err)
		},
	} {
		for _, verdict := range []string{store.VerdictApplied, store.VerdictNotApplied} {
			id := heldWithCheck(t, e, time.Hour)
			rec, ok, err := e.BeginCheck(ctx, id, "tok-A", "chk-1", 200*time.Millisecond, false)
			MustOK(t, "BeginCheck", ok, err)
			if name != "late result" {
				WaitPast(t, h, e, rec.CheckLeaseUntil)
			}
			resolve(id)
			before := MustGet(t, e, id)
			o := outcome(id, "chk-1", verdict, 200)
			o.NotFoundChecks = 1
			o.Result = store.Result{Status: 200, Body: []byte(`[{"id":"D-1"}]`), ExternalID: "D-1"}
			rec, ok, err = e.EndCheck(ctx, o)
			if err != nil || ok {
				t.Errorf("%s, then a late %s check: %v, %v; want refused", name, verdict, ok, err)
			}
			if after := MustGet(t, e, id); !reflect.DeepEqual(after, before) || !reflect.DeepEqual(rec, before) {
				t.Errorf("%s, then a late %s check changed the record:\n got %+v\nwant %+v", name, verdict, after, before)
			}
		}
	}
}

// TestOneCheckAtATime: of many gateways asking for one record's check
// lease at once, one gets it; once it ends, the next may.
func testOneCheckAtATime(t *testing.T, h Harness, e store.Engine) {
	id := heldWithCheck(t, e, time.Hour)
	var won atomic.Int64
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok, err := e.BeginCheck(context.Background(), id, "tok-A", fmt.Sprintf("chk-%d", i), 5*time.Second, false)
			if err != nil {
				t.Error(err)
			}
			if ok {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d of 50 got the check lease, want 1", won.Load())
	}
}

func testCheckArguments(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	if _, _, err := e.BeginCheck(ctx, "bad{id}", "a", "b", time.Second, false); !errors.Is(err, store.ErrInvalidID) {
		t.Errorf("bad id: %v", err)
	}
	for name, args := range map[string][2]string{"no claim token": {"", "b"}, "no check token": {"a", ""}} {
		if _, _, err := e.BeginCheck(ctx, id, args[0], args[1], time.Second, false); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := e.BeginCheck(ctx, id, "a", "b", 0, false); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("no lease: %v", err)
	}
	for name, change := range map[string]func(o *store.CheckOutcome){
		"verdict":          func(o *store.CheckOutcome) { o.Entry.Verdict = "maybe" },
		"status":           func(o *store.CheckOutcome) { o.Entry.Status = 42 },
		"not found checks": func(o *store.CheckOutcome) { o.NotFoundChecks = 0 },
		"negative every":   func(o *store.CheckOutcome) { o.Every = -1 },
		"applied, no result status": func(o *store.CheckOutcome) {
			o.Entry.Verdict = store.VerdictApplied
		},
	} {
		o := outcome(id, "chk-1", store.VerdictNotApplied, 200)
		change(&o)
		if _, _, err := e.EndCheck(ctx, o); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, c := range map[string]store.Check{
		"method":      {Method: "GE T", URL: "http://x/"},
		"url spaces":  {Method: "GET", URL: "http://x/ y"},
		"no url":      {Method: "GET"},
		"match path":  {Method: "GET", URL: "http://x/", Match: []store.CheckMatch{{Path: "", Value: "k"}}},
		"match value": {Method: "GET", URL: "http://x/", Match: []store.CheckMatch{{Path: "0.k", Value: strings.Repeat("v", store.MaxCheckMatchValue+1)}}},
		"match UTF-8": {Method: "GET", URL: "http://x/", Match: []store.CheckMatch{{Path: "0.k", Value: "\xff"}}},
		"matches":     {Method: "GET", URL: "http://x/", Match: make([]store.CheckMatch, store.MaxCheckMatches+1)},
	} {
		req := ClaimReq(NewID(t), "tok-A")
		req.Check = c
		if _, err := e.Claim(ctx, req); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("claim with check %s: %v", name, err)
		}
	}
}

// TestOperatorCheckAudited: an operator's check is kept on the audit
// trail with the check it made; a refused one leaves none.
func testOperatorCheckAudited(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := heldWithCheck(t, e, time.Hour)
	mustBegin(t, e, id, "tok-A", "chk-1", false)
	o := outcome(id, "chk-1", store.VerdictInconclusive, 500)
	o.Operator = &store.Action{Actor: "alice", Reason: "the CRM is back"}
	rec := mustEnd(t, e, o)
	if len(rec.Audit) != 1 || rec.Audit[0].Action != store.AuditVerify || rec.Audit[0].Actor != "alice" ||
		rec.Audit[0].Reason != "the CRM is back" || !rec.Audit[0].At.Equal(rec.Checks[0].At) {
		t.Fatalf("audit %+v, checks %+v", rec.Audit, rec.Checks)
	}
	if _, _, err := e.EndCheck(ctx, o); err != nil {
		t.Fatal(err)
	}
	if rec = MustGet(t, e, id); len(rec.Audit) != 1 || len(rec.Checks) != 1 {
		t.Errorf("a refused check was audited: %+v", rec.Audit)
	}
	o.Operator = &store.Action{}
	if _, _, err := e.EndCheck(ctx, o); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("an operator without a name: %v", err)
	}
}

// TestOperatorRefusedDuringCheck: while a verification check holds the
// record (a live check lease), an operator's release and completion are
// refused with a conflict that says so, and change nothing: the check's
// verdict lands. Once the lease has run out, the operator may act.
func testOperatorRefusedDuringCheck(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := heldWithCheck(t, e, time.Hour)
	mustBegin(t, e, id, "tok-A", "chk-1", false)
	before := MustGet(t, e, id)
	for name, op := range map[string]func() (*store.Record, error){
		"release":  func() (*store.Record, error) { return e.OperatorRelease(ctx, id, act, time.Hour) },
		"complete": func() (*store.Record, error) { return e.OperatorComplete(ctx, id, SampleResult(), act, time.Hour) },
	} {
		rec, err := op()
		if !errors.Is(err, store.ErrConflict) || !errors.Is(err, store.ErrCheckRunning) || !strings.Contains(err.Error(), id) {
			t.Errorf("operator %s during a check: %v, want a conflict (check running) naming the record", name, err)
		}
		if !reflect.DeepEqual(rec, before) {
			t.Errorf("operator %s during a check returned %+v, want the unchanged record %+v", name, rec, before)
		}
		if got := MustGet(t, e, id); !reflect.DeepEqual(got, before) {
			t.Fatalf("operator %s during a check changed the record:\n got %+v\nwant %+v", name, got, before)
		}
	}
	o := outcome(id, "chk-1", store.VerdictApplied, 200)
	o.Result = store.Result{Status: 201, Body: []byte(`{"id":"D-1"}`), ExternalID: "D-1"}
	if rec := mustEnd(t, e, o); rec.State != store.StateCompleted || rec.Reason != store.ReasonVerified || rec.ExternalID != "D-1" || len(rec.Audit) != 0 {
		t.Fatalf("the check's verdict after the refused operators: %+v, want completed (verified), no audit", rec)
	}

	// A lease that ran out (its gateway died mid-check) holds nothing.
	id = heldWithCheck(t, e, time.Hour)
	rec, ok, err := e.BeginCheck(ctx, id, "tok-A", "chk-1", 300*time.Millisecond, false)
	MustOK(t, "BeginCheck", ok, err)
	WaitPast(t, h, e, rec.CheckLeaseUntil)
	if rec, err := e.OperatorRelease(ctx, id, act, time.Hour); err != nil || rec.State != store.StateReleased {
		t.Fatalf("operator release after the check lease ran out: %+v, %v", rec, err)
	}
	late := outcome(id, "chk-1", store.VerdictApplied, 200)
	late.Result = store.Result{Status: 201}
	if _, ok, err := e.EndCheck(ctx, late); err != nil || ok {
		t.Errorf("the expired check's late end: %v, %v; want refused", ok, err)
	}
}
