package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(
		test{"ClaimCompleteReplay", testClaimCompleteReplay},
		test{"ClaimHandle", testClaimHandle},
		test{"NegativeDurations", testNegativeDurations},
		test{"ClaimRetriedWithSameToken", testClaimRetriedWithSameToken},
		test{"ClaimRace", testClaimRace},
		test{"FencingAfterTakeOver", testFencingAfterTakeOver},
		test{"FencedCallsOnAbsentRecord", testFencedCallsOnAbsentRecord},
		test{"CompleteWritesMissingRecord", testCompleteWritesMissingRecord},
		test{"LeaseExpiry", testLeaseExpiry},
		test{"LateFinisherResolvesHeldRecord", testLateFinisherResolvesHeldRecord},
		test{"RenewKeepsClaimAlive", testRenewKeepsClaimAlive},
		test{"TTLs", testTTLs},
		test{"ReleaseThenReclaim", testReleaseThenReclaim},
		test{"ReleasedTakenByAnyPayload", testReleasedTakenByAnyPayload},
		test{"BinaryBodyAndMultiValueHeaders", testBinaryBodyAndMultiValueHeaders},
		test{"BodyOmittedAndEmpty", testBodyOmittedAndEmpty},
		test{"InvalidIDs", testInvalidIDs},
		test{"ClaimRequestValidation", testClaimRequestValidation},
		test{"RecordsExpire", testRecordsExpire},
		test{"Secret", testSecret},
		test{"SecretCheck", testSecretCheck},
	)
}

func testClaimCompleteReplay(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	before := h.Now(t, e)

	first := MustClaim(t, e, ClaimReq(id, "tok-A"))
	r := first.Record
	if !first.Claimed || first.TakeOver {
		t.Fatalf("first claim: Claimed=%v TakeOver=%v, want true,false", first.Claimed, first.TakeOver)
	}
	if r.State != store.StateInFlight || r.Token != "tok-A" || r.Attempts != 1 || r.Executions != 1 {
		t.Fatalf("first claim record: %+v", r)
	}
	if r.ID != id || r.Route != "create_crm_deal" || r.Operation != "create_crm_deal" ||
		r.Fingerprint != "fp-1" || r.FingerprintRule != "body=amount,currency" {
		t.Fatalf("identity fields not stored: %+v", r)
	}
	if r.StartedAt.Before(before.Truncate(time.Millisecond)) || !r.LeaseUntil.Equal(r.StartedAt.Add(30*time.Second)) {
		t.Fatalf("StartedAt %v LeaseUntil %v (clock before claim %v)", r.StartedAt, r.LeaseUntil, before)
	}
	if first.Now.Before(before.Truncate(time.Millisecond)) || !first.Now.Equal(r.StartedAt) {
		t.Fatalf("claim Now %v, StartedAt %v", first.Now, r.StartedAt)
	}

	dup := MustClaim(t, e, ClaimReq(id, "tok-B"))
	if dup.Claimed || dup.Record.State != store.StateInFlight || dup.Record.Token != "tok-A" || dup.Record.Attempts != 2 {
		t.Fatalf("concurrent duplicate: Claimed=%v record %+v", dup.Claimed, dup.Record)
	}

	want := SampleResult()
	ok, err := complete(e, id, "tok-A", want, time.Hour)
	MustOK(t, "Complete", ok, err)

	replay := MustClaim(t, e, ClaimReq(id, "tok-C"))
	r = replay.Record
	if replay.Claimed || replay.TakeOver {
		t.Fatalf("replay claim: Claimed=%v TakeOver=%v", replay.Claimed, replay.TakeOver)
	}
	if r.State != store.StateCompleted || r.Status != 201 || !bytes.Equal(r.Body, want.Body) ||
		!reflect.DeepEqual(r.Header, want.Header) || r.Digest != want.Digest || r.ExternalID != "deal_42" ||
		r.BodyOmitted || r.Attempts != 3 || r.Executions != 1 || r.Token != "tok-A" {
		t.Fatalf("replayed record: %+v", r)
	}
	if r.CompletedAt.Before(r.StartedAt) {
		t.Fatalf("CompletedAt %v before StartedAt %v", r.CompletedAt, r.StartedAt)
	}

	got := MustGet(t, e, id)
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("Get differs from the claim's record:\n got %+v\nwant %+v", got, r)
	}
	// What a caller does with a returned record does not change the store.
	got.Body[0] = 'X'
	got.Header.Set("Location", "elsewhere")
	if again := MustGet(t, e, id); !reflect.DeepEqual(again, r) {
		t.Fatalf("changing a returned record changed the stored one: %+v", again)
	}
	if rec, err := e.Get(ctx, NewID(t)); rec != nil || err != nil {
		t.Fatalf("Get(absent) = %v, %v; want nil, nil", rec, err)
	}
}

// TestClaimHandle: a claim that is taken comes with its handle, which
// carries the id, the token, the lease and the TTLs of the request: it
// renews and completes the record without them being passed again.
func testClaimHandle(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	req := ClaimReq(id, "tok-A")
	req.Lease, req.TTL = 20*time.Second, time.Hour
	c := MustClaim(t, e, req).Claim
	if c == nil || c.ID() != id || c.Lease() != 20*time.Second || c.TTL != time.Hour {
		t.Fatalf("handle %+v; want id %s, lease 20s, TTL 1h", c, id)
	}
	if ok, err := c.Renew(ctx); !ok || err != nil {
		t.Fatalf("Renew through the handle: %v, %v", ok, err)
	}
	if other := MustClaim(t, e, ClaimReq(id, "tok-B")); other.Claim != nil {
		t.Fatalf("a second claimant got a handle: %+v", other.Claim)
	}
	if ok, err := c.Complete(ctx, SampleResult()); !ok || err != nil {
		t.Fatalf("Complete through the handle: %v, %v", ok, err)
	}
	if rec := MustGet(t, e, id); rec.State != store.StateCompleted || rec.Status != 201 {
		t.Fatalf("after Complete: %s %d", rec.State, rec.Status)
	}
	CheckTTL(t, h, e, id, time.Hour)
}

func testClaimRetriedWithSameToken(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	MustClaim(t, e, ClaimReq(id, "tok-A"))
	again := MustClaim(t, e, ClaimReq(id, "tok-A"))
	if !again.Claimed || again.TakeOver || again.Record.Attempts != 1 || again.Record.Executions != 1 {
		t.Fatalf("retried claim: Claimed=%v TakeOver=%v record %+v", again.Claimed, again.TakeOver, again.Record)
	}
}

func testClaimRace(t *testing.T, h Harness, e store.Engine) {
	const n = 50
	id := NewID(t)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]store.ClaimResult, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.Claim(context.Background(), ClaimReq(id, fmt.Sprintf("tok-%02d", i)))
		})
	}
	close(start)
	wg.Wait()
	winner := ""
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if res.Claimed {
			if winner != "" {
				t.Fatalf("two winners: %s and tok-%02d", winner, i)
			}
			winner = fmt.Sprintf("tok-%02d", i)
			continue
		}
		if res.Record.State != store.StateInFlight {
			t.Fatalf("loser %d sees state %q, want in_flight", i, res.Record.State)
		}
	}
	if winner == "" {
		t.Fatal("nobody claimed")
	}
	for i, res := range results {
		if !res.Claimed && res.Record.Token != winner {
			t.Fatalf("loser %d sees token %q, want the winner's %q", i, res.Record.Token, winner)
		}
	}
	r := MustGet(t, e, id)
	if r.Attempts != n || r.Executions != 1 || r.Token != winner {
		t.Fatalf("after the race: attempts %d executions %d token %q; want %d, 1, %q", r.Attempts, r.Executions, r.Token, n, winner)
	}
}

// fencedOps are the calls a claim token fences.
var fencedOps = []struct {
	name string
	call func(e store.Engine, id, token string) (bool, error)
}{
	{"Renew", func(e store.Engine, id, tok string) (bool, error) {
		return e.Renew(context.Background(), id, tok, time.Minute)
	}},
	{"Complete", func(e store.Engine, id, tok string) (bool, error) {
		return complete(e, id, tok, SampleResult(), time.Hour)
	}},
	{"Release", func(e store.Engine, id, tok string) (bool, error) {
		return e.Release(context.Background(), id, tok, time.Hour)
	}},
	{"MarkUnknown", func(e store.Engine, id, tok string) (bool, error) {
		return e.MarkUnknown(context.Background(), id, tok, "upstream_timeout", time.Hour)
	}},
}

func testFencingAfterTakeOver(t *testing.T, h Harness, e store.Engine) {
	for _, op := range fencedOps {
		t.Run(op.name, func(t *testing.T) {
			id := NewID(t)
			req := ClaimReq(id, "tok-old")
			req.Lease = 300 * time.Millisecond
			req.OnExpired = store.ExpiredRelease
			old := MustClaim(t, e, req)
			WaitPast(t, h, e, old.Record.LeaseUntil)

			req.Token = "tok-new"
			req.Lease = time.Minute
			taken := MustClaim(t, e, req)
			if !taken.Claimed || !taken.TakeOver || taken.Record.Token != "tok-new" || taken.Record.Executions != 2 {
				t.Fatalf("takeover: Claimed=%v TakeOver=%v record %+v", taken.Claimed, taken.TakeOver, taken.Record)
			}

			ok, err := op.call(e, id, "tok-old")
			MustLose(t, op.name+" with the stale token", ok, err)
			if r := MustGet(t, e, id); !reflect.DeepEqual(r, taken.Record) {
				t.Fatalf("stale %s changed the record:\n got %+v\nwant %+v", op.name, r, taken.Record)
			}
			ok, err = op.call(e, id, "tok-new")
			MustOK(t, op.name+" with the current token", ok, err)
		})
	}
}

func testFencedCallsOnAbsentRecord(t *testing.T, h Harness, e store.Engine) {
	for _, op := range fencedOps {
		if op.name == "Complete" {
			continue // writes the record: see CompleteWritesMissingRecord
		}
		id := NewID(t)
		ok, err := op.call(e, id, "tok")
		MustLose(t, op.name, ok, err)
		if r, err := e.Get(context.Background(), id); r != nil || err != nil {
			t.Fatalf("%s on an absent record created it: %+v, %v", op.name, r, err)
		}
	}
}

// testCompleteWritesMissingRecord: a result whose claim is gone (a
// failover lost it, or it expired meanwhile) is written anew, so the call
// that ran is not run again.
func testCompleteWritesMissingRecord(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	started := h.Now(t, e).Add(-time.Second).Truncate(time.Millisecond)
	req := ClaimReq(id, "tok-A")
	ok, err := e.Complete(context.Background(), store.CompleteRequest{Claim: req, StartedAt: started, Result: SampleResult(), TTL: time.Hour})
	MustOK(t, "Complete of a missing record", ok, err)
	r := MustGet(t, e, id)
	want := SampleResult()
	if r.State != store.StateCompleted || r.Token != "tok-A" || r.Attempts != 1 || r.Executions != 1 ||
		r.Route != req.Route || r.Operation != req.Operation || r.Fingerprint != req.Fingerprint ||
		r.FingerprintRule != req.FingerprintRule || !r.StartedAt.Equal(started) || r.CompletedAt.Before(started) ||
		r.Status != want.Status || !bytes.Equal(r.Body, want.Body) || !reflect.DeepEqual(r.Header, want.Header) ||
		r.Digest != want.Digest || r.ExternalID != want.ExternalID {
		t.Fatalf("written record %+v", r)
	}
	CheckTTL(t, h, e, id, time.Hour)
	replay := MustClaim(t, e, ClaimReq(id, "tok-B"))
	if replay.Claimed || replay.Record.State != store.StateCompleted || replay.Record.Executions != 1 {
		t.Fatalf("retry after the written result: %+v", replay)
	}
}

func testLeaseExpiry(t *testing.T, h Harness, e store.Engine) {
	cases := []struct {
		name        string
		onExpired   store.Expired
		fingerprint string
		wantClaimed bool
		wantState   store.State
		wantReason  string
		wantExe     int64
	}{
		{"hold", "hold", "fp-1", false, store.StateUnknown, "lease_expired", 1},
		{"default is hold", "", "fp-1", false, store.StateUnknown, "lease_expired", 1},
		{"hold whatever the fingerprint", "hold", "fp-other", false, store.StateUnknown, "lease_expired", 1},
		{"release takes over", "release", "fp-1", true, store.StateInFlight, "", 2},
		{"release never for another fingerprint", "release", "fp-other", false, store.StateInFlight, "", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := NewID(t)
			req := ClaimReq(id, "tok-A")
			req.Lease = 300 * time.Millisecond
			req.HoldTTL = 2 * time.Hour
			first := MustClaim(t, e, req)
			WaitPast(t, h, e, first.Record.LeaseUntil)

			req.Token = "tok-B"
			req.OnExpired = tc.onExpired
			req.Fingerprint = tc.fingerprint
			req.HoldTTL = 3 * time.Hour
			res := MustClaim(t, e, req)
			r := res.Record
			if res.Claimed != tc.wantClaimed || res.TakeOver != tc.wantClaimed {
				t.Fatalf("Claimed=%v TakeOver=%v, want %v", res.Claimed, res.TakeOver, tc.wantClaimed)
			}
			if r.State != tc.wantState || r.Reason != tc.wantReason || r.Attempts != 2 || r.Executions != tc.wantExe {
				t.Fatalf("record %+v; want state %q reason %q attempts 2 executions %d", r, tc.wantState, tc.wantReason, tc.wantExe)
			}
			wantTok := "tok-A"
			if tc.wantClaimed {
				wantTok = "tok-B"
				if !r.StartedAt.After(first.Record.StartedAt) || !r.LeaseUntil.Equal(r.StartedAt.Add(300*time.Millisecond)) {
					t.Fatalf("takeover did not restart the lease: started %v lease %v", r.StartedAt, r.LeaseUntil)
				}
			}
			if r.Token != wantTok {
				t.Fatalf("token %q, want %q", r.Token, wantTok)
			}
			if tc.wantState == store.StateUnknown || tc.wantClaimed {
				CheckTTL(t, h, e, id, 3*time.Hour)
			}
			if tc.wantState == store.StateUnknown {
				// Held records stay held for later requests.
				again := MustClaim(t, e, req)
				if again.Claimed || again.Record.State != store.StateUnknown {
					t.Fatalf("held record claimed again: %+v", again)
				}
			}
		})
	}
}

func testLateFinisherResolvesHeldRecord(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	req := ClaimReq(id, "tok-A")
	req.Lease = 300 * time.Millisecond
	first := MustClaim(t, e, req)
	WaitPast(t, h, e, first.Record.LeaseUntil)
	req.Token = "tok-B"
	if res := MustClaim(t, e, req); res.Record.State != store.StateUnknown {
		t.Fatalf("state %q, want outcome_unknown", res.Record.State)
	}
	// The slow claimant's real outcome still lands: nobody took over.
	ok, err := complete(e, id, "tok-A", SampleResult(), time.Hour)
	MustOK(t, "late Complete", ok, err)
	r := MustGet(t, e, id)
	if r.State != store.StateCompleted || r.Reason != "" || r.Status != 201 {
		t.Fatalf("record %+v", r)
	}
	CheckTTL(t, h, e, id, time.Hour)
}

func testRenewKeepsClaimAlive(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	req := ClaimReq(id, "tok-A")
	req.Lease = 300 * time.Millisecond
	req.OnExpired = store.ExpiredRelease
	first := MustClaim(t, e, req)

	ok, err := e.Renew(ctx, id, "tok-A", time.Minute)
	MustOK(t, "Renew", ok, err)
	ok, err = e.Renew(ctx, id, "tok-other", time.Minute)
	MustLose(t, "Renew with another token", ok, err)

	WaitPast(t, h, e, first.Record.LeaseUntil)
	req.Token = "tok-B"
	res := MustClaim(t, e, req)
	if res.Claimed || res.Record.State != store.StateInFlight || res.Record.Token != "tok-A" {
		t.Fatalf("renewed claim was taken over: Claimed=%v record %+v", res.Claimed, res.Record)
	}
	if !res.Record.LeaseUntil.After(first.Record.LeaseUntil.Add(30 * time.Second)) {
		t.Fatalf("LeaseUntil %v not extended (was %v)", res.Record.LeaseUntil, first.Record.LeaseUntil)
	}

	ok, err = complete(e, id, "tok-A", SampleResult(), time.Hour)
	MustOK(t, "Complete", ok, err)
	ok, err = e.Renew(ctx, id, "tok-A", time.Minute)
	MustLose(t, "Renew after Complete", ok, err)
}

func testTTLs(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()

	inflight := NewID(t)
	req := ClaimReq(inflight, "tok")
	req.HoldTTL = 2 * time.Hour
	MustClaim(t, e, req)
	CheckTTL(t, h, e, inflight, 2*time.Hour)

	completed := NewID(t)
	MustClaim(t, e, ClaimReq(completed, "tok"))
	ok, err := complete(e, completed, "tok", SampleResult(), 72*time.Hour)
	MustOK(t, "Complete", ok, err)
	CheckTTL(t, h, e, completed, 72*time.Hour)

	unknown := NewID(t)
	MustClaim(t, e, ClaimReq(unknown, "tok"))
	ok, err = e.MarkUnknown(ctx, unknown, "tok", "upstream_5xx", 5*time.Hour)
	MustOK(t, "MarkUnknown", ok, err)
	CheckTTL(t, h, e, unknown, 5*time.Hour)
	r := MustGet(t, e, unknown)
	if r.State != store.StateUnknown || r.Reason != "upstream_5xx" {
		t.Fatalf("record %+v", r)
	}
	// A completed record is never demoted.
	ok, err = e.MarkUnknown(ctx, completed, "tok", "upstream_5xx", 5*time.Hour)
	MustLose(t, "MarkUnknown on a completed record", ok, err)
	if r := MustGet(t, e, completed); r.State != store.StateCompleted {
		t.Fatalf("completed record became %q", r.State)
	}
	// Nor does a replay's claim change a record's lifetime.
	MustClaim(t, e, ClaimReq(completed, "tok-replay"))
	CheckTTL(t, h, e, completed, 72*time.Hour)

	released := NewID(t)
	MustClaim(t, e, ClaimReq(released, "tok"))
	ok, err = e.Release(ctx, released, "tok", 10*time.Minute)
	MustOK(t, "Release", ok, err)
	CheckTTL(t, h, e, released, 10*time.Minute)

	defaults := NewID(t)
	req = ClaimReq(defaults, "tok")
	req.Lease, req.HoldTTL = 0, 0
	res := MustClaim(t, e, req)
	CheckTTL(t, h, e, defaults, store.DefaultHoldTTL)
	if got := res.Record.LeaseUntil.Sub(res.Record.StartedAt); got != store.DefaultLease {
		t.Fatalf("default lease %v, want %v", got, store.DefaultLease)
	}
	ok, err = complete(e, defaults, "tok", SampleResult(), 0)
	MustOK(t, "Complete", ok, err)
	CheckTTL(t, h, e, defaults, store.DefaultTTL)
}

// testReleasedTakenByAnyPayload: a record released because the upstream
// refused its request as sent (a 401: a forged delivery refused by a
// receiver that checks signatures) saved no result and took no effect, and
// that request will not come back: a claim of another payload (the
// genuine event) or under another fingerprint rule takes it over, with its
// own fingerprint. A record released after "come back later" (429), by
// its claim, or after an unknown outcome is taken over only by its own
// payload.
func testReleasedTakenByAnyPayload(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	notDone := func(status int, unknown bool) func(id string) {
		return func(id string) {
			out, err := e.NotDone(ctx, store.NotDoneRequest{ID: id, Token: "tok-A", Status: status, Unknown: unknown, MaxExecutions: 5, TTL: time.Hour})
			if err != nil || out != store.NotDoneReleased {
				t.Fatalf("NotDone %d: %v, %v", status, out, err)
			}
		}
	}
	for _, tt := range []struct {
		name    string
		release func(id string)
		free    bool
	}{
		{"refused (401)", notDone(401, false), true},
		{"refused (404)", notDone(404, false), true},
		{"come back later (429)", notDone(429, false), false},
		{"released by its claim", func(id string) {
			ok, err := e.Release(ctx, id, "tok-A", time.Hour)
			MustOK(t, "Release", ok, err)
		}, false},
		{"an unknown outcome let go", notDone(502, true), false},
	} {
		id := NewID(t)
		MustClaim(t, e, ClaimReq(id, "tok-A"))
		tt.release(id)
		if r := MustGet(t, e, id); tt.free != (r.Reason == store.ReasonRefused) {
			t.Fatalf("%s: released with reason %q", tt.name, r.Reason)
		}
		other := ClaimReq(id, "tok-X")
		other.Fingerprint, other.FingerprintRule = "fp-other", "whole-body"
		res := MustClaim(t, e, other)
		if !tt.free {
			if res.Claimed || res.Record.State != store.StateReleased || res.Record.Fingerprint == "fp-other" {
				t.Fatalf("%s: another payload took the record over: %+v", tt.name, res)
			}
			if res := MustClaim(t, e, ClaimReq(id, "tok-B")); !res.Claimed || !res.TakeOver {
				t.Fatalf("%s: its own payload did not take it over: %+v", tt.name, res)
			}
			continue
		}
		if !res.Claimed || !res.TakeOver || res.Record.Fingerprint != "fp-other" || res.Record.FingerprintRule != "whole-body" || res.Record.Executions != 2 {
			t.Fatalf("%s: another payload's claim: Claimed=%v TakeOver=%v record %+v; want it taken over with its fingerprint", tt.name, res.Claimed, res.TakeOver, res.Record)
		}
		ok, err := complete(e, id, "tok-X", SampleResult(), time.Hour)
		MustOK(t, "Complete by the other payload", ok, err)
		if r := MustGet(t, e, id); r.Fingerprint != "fp-other" || r.State != store.StateCompleted {
			t.Fatalf("%s: completed record %+v, want fp-other", tt.name, r)
		}
	}
}

func testReleaseThenReclaim(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	MustClaim(t, e, ClaimReq(id, "tok-A"))
	MustClaim(t, e, ClaimReq(id, "tok-dup")) // a duplicate while in flight
	ok, err := e.Release(ctx, id, "tok-A", time.Hour)
	MustOK(t, "Release", ok, err)
	r := MustGet(t, e, id)
	if r.State != store.StateReleased || r.Attempts != 2 || r.Executions != 1 {
		t.Fatalf("released record %+v; want attempts 2 executions 1", r)
	}

	other := ClaimReq(id, "tok-X")
	other.Fingerprint = "fp-other"
	if res := MustClaim(t, e, other); res.Claimed || res.Record.State != store.StateReleased {
		t.Fatalf("another payload reclaimed a released record: %+v", res)
	}
	otherRule := ClaimReq(id, "tok-X")
	otherRule.FingerprintRule = "whole-body"
	if res := MustClaim(t, e, otherRule); res.Claimed {
		t.Fatalf("a claim under another fingerprint rule reclaimed: %+v", res)
	}

	res := MustClaim(t, e, ClaimReq(id, "tok-B"))
	r = res.Record
	if !res.Claimed || !res.TakeOver || r.State != store.StateInFlight || r.Token != "tok-B" ||
		r.Attempts != 5 || r.Executions != 2 {
		t.Fatalf("reclaim: Claimed=%v TakeOver=%v record %+v; want attempts 5 executions 2", res.Claimed, res.TakeOver, r)
	}
	CheckTTL(t, h, e, id, 720*time.Hour)
	ok, err = complete(e, id, "tok-A", SampleResult(), time.Hour)
	MustLose(t, "Complete by the releaser", ok, err)
	ok, err = complete(e, id, "tok-B", SampleResult(), time.Hour)
	MustOK(t, "Complete by the reclaimer", ok, err)
}

func testBinaryBodyAndMultiValueHeaders(t *testing.T, h Harness, e store.Engine) {
	body := make([]byte, 0, 600)
	for i := range 256 {
		body = append(body, byte(i))
	}
	body = append(body, 0xff, 0xfe, 0x00, 0xc3, 0x28, '\r', '\n', 0x80)
	body = append(body, bytes.Repeat([]byte{0xed, 0xa0, 0x80}, 100)...) // surrogate halves: invalid UTF-8
	header := http.Header{
		"Set-Cookie":     {"a=1; Path=/", "b=2; HttpOnly", "c=3; Expires=Wed, 21 Oct 2015 07:28:00 GMT"},
		"Content-Type":   {"text/plain; charset=iso-8859-1"},
		"Location":       {"https://crm.example/deals/42?x=a:b"},
		"X-Empty":        {""},
		"X-Leading":      {"  two leading spaces"},
		"X-Lowercase-ok": {"kept as written"},
	}
	id := NewID(t)
	MustClaim(t, e, ClaimReq(id, "tok"))
	res := store.Result{Status: 200, Header: header, Body: body, Digest: "d", ExternalID: "x"}
	ok, err := complete(e, id, "tok", res, time.Hour)
	MustOK(t, "Complete", ok, err)
	for _, r := range []*store.Record{MustClaim(t, e, ClaimReq(id, "tok-2")).Record, MustGet(t, e, id)} {
		if !bytes.Equal(r.Body, body) {
			t.Fatalf("body differs: got %d bytes %q", len(r.Body), r.Body)
		}
		if !reflect.DeepEqual(r.Header, header) {
			t.Fatalf("header differs:\n got %#v\nwant %#v", r.Header, header)
		}
	}

	// Names that cannot go on the wire are dropped, CR and LF in values
	// become spaces: what the Redis wire format keeps.
	odd := NewID(t)
	MustClaim(t, e, ClaimReq(odd, "tok"))
	res.Header = http.Header{"Bad:Name": {"x"}, "": {"y"}, "X-Split": {"a\r\nb"}}
	ok, err = complete(e, odd, "tok", res, time.Hour)
	MustOK(t, "Complete", ok, err)
	if got := MustGet(t, e, odd).Header; !reflect.DeepEqual(got, http.Header{"X-Split": {"a  b"}}) {
		t.Fatalf("header %#v", got)
	}
}

func testBodyOmittedAndEmpty(t *testing.T, h Harness, e store.Engine) {
	id := NewID(t)
	MustClaim(t, e, ClaimReq(id, "tok"))
	res := store.Result{Status: 200, BodyOmitted: true, Digest: strings.Repeat("ab", 32)}
	ok, err := complete(e, id, "tok", res, time.Hour)
	MustOK(t, "Complete", ok, err)
	r := MustGet(t, e, id)
	if !r.BodyOmitted || len(r.Body) != 0 || r.Header != nil || r.Digest != res.Digest {
		t.Fatalf("record %+v", r)
	}
}

func testInvalidIDs(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	for _, bad := range []string{"", "a}b", "a{b", "with space", "x:y", strings.Repeat("a", 129), "caf\xc3\xa9"} {
		if _, err := e.Claim(ctx, ClaimReq(bad, "tok")); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("Claim(%q) err = %v, want ErrInvalidID", bad, err)
		}
		if _, err := e.Get(ctx, bad); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("Get(%q) err = %v, want ErrInvalidID", bad, err)
		}
		if _, err := complete(e, bad, "tok", store.Result{}, time.Hour); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("Complete(%q) err = %v, want ErrInvalidID", bad, err)
		}
		if _, err := e.Renew(ctx, bad, "tok", time.Second); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("Renew(%q) err = %v, want ErrInvalidID", bad, err)
		}
	}
	if _, err := e.Claim(ctx, ClaimReq(strings.Repeat("a", 128), "tok")); err != nil {
		t.Errorf("a 128-byte id: %v", err)
	}
}

func testClaimRequestValidation(t *testing.T, h Harness, e store.Engine) {
	for _, tc := range []struct {
		name string
		edit func(*store.ClaimRequest)
	}{
		{"no token", func(r *store.ClaimRequest) { r.Token = "" }},
		{"bad on_expired", func(r *store.ClaimRequest) { r.OnExpired = "maybe" }},
		{"negative lease", func(r *store.ClaimRequest) { r.Lease = -time.Second }},
		{"negative hold", func(r *store.ClaimRequest) { r.HoldTTL = -time.Second }},
	} {
		req := ClaimReq(NewID(t), "tok")
		tc.edit(&req)
		if _, err := e.Claim(context.Background(), req); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", tc.name, err)
		}
		if r, _ := e.Get(context.Background(), req.ID); r != nil {
			t.Errorf("%s: a refused claim left a record", tc.name)
		}
	}
}

// testNegativeDurations: a claim handle's call with a negative lease or
// lifetime is refused before anything changes, with an error that wraps
// ErrInvalidArgument, as every other argument the store refuses.
func testNegativeDurations(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	req := ClaimReq(id, "tok")
	MustClaim(t, e, req)
	for name, call := range map[string]func() (bool, error){
		"Renew": func() (bool, error) { return e.Renew(ctx, id, "tok", -time.Second) },
		"Complete": func() (bool, error) {
			return e.Complete(ctx, store.CompleteRequest{Claim: req, Result: store.Result{Status: 200}, TTL: -time.Second})
		},
		"Release":     func() (bool, error) { return e.Release(ctx, id, "tok", -time.Second) },
		"MarkUnknown": func() (bool, error) { return e.MarkUnknown(ctx, id, "tok", "x", -time.Second) },
	} {
		if ok, err := call(); ok || !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s with a negative duration: %v, %v; want false and ErrInvalidArgument", name, ok, err)
		}
	}
	if r := MustGet(t, e, id); r.State != store.StateInFlight || r.Token != "tok" {
		t.Fatalf("refused calls changed the record: %+v", r)
	}
}

// testRecordsExpire: a record whose TTL ran out is gone.
func testRecordsExpire(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := NewID(t)
	MustClaim(t, e, ClaimReq(id, "tok"))
	ok, err := e.Release(ctx, id, "tok", 50*time.Millisecond)
	MustOK(t, "Release", ok, err)
	for range 1000 {
		r, err := e.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r == nil {
			// Gone for claims too: the next one creates it anew.
			if res := MustClaim(t, e, ClaimReq(id, "tok-2")); !res.Claimed || res.TakeOver || res.Record.Attempts != 1 {
				t.Fatalf("claim after expiry: %+v", res)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("record never expired")
}

func testSecret(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	if kept, err := e.KeptSecret(ctx); kept != nil || err != nil {
		t.Fatalf("KeptSecret of a new store: %d bytes, %v; want none", len(kept), err)
	}
	a, err := e.Secret(ctx)
	if err != nil {
		t.Fatalf("Secret: %v", err)
	}
	if kept, err := e.KeptSecret(ctx); !bytes.Equal(kept, a) || err != nil {
		t.Fatalf("KeptSecret after Secret: %d bytes, %v; want the kept secret", len(kept), err)
	}
	// 32 random bytes, or their hex text (the Redis engine keeps text, so
	// the value can be copied into the `secret` option as it is).
	if len(a) < 32 || bytes.Count(a, a[:1]) == len(a) {
		t.Fatalf("secret of %d bytes, all alike: %v", len(a), bytes.Count(a, a[:1]) == len(a))
	}
	b, err := e.Secret(ctx)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("a second Secret differs (err %v)", err)
	}
	b[0] ^= 0xff
	if c, _ := e.Secret(ctx); !bytes.Equal(a, c) {
		t.Fatal("changing a returned secret changed the kept one")
	}
}

// testSecretCheck: the first check value kept wins, with its creation
// time; calls at once with other values all get it back.
func testSecretCheck(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	if e.Where() == "" {
		t.Fatal("Where names no store")
	}
	before := time.Now().Add(-time.Second)
	vals := make([][]byte, 8)
	got := make([]store.SecretCheck, len(vals))
	errs := make([]error, len(vals))
	var wg sync.WaitGroup
	for i := range vals {
		vals[i] = bytes.Repeat([]byte{byte(i + 1)}, 32)
		wg.Go(func() { got[i], errs[i] = e.KeepSecretCheck(ctx, vals[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("KeepSecretCheck: %v", err)
	}
	if !slices.ContainsFunc(vals, func(v []byte) bool { return bytes.Equal(v, got[0].Value) }) {
		t.Fatalf("kept check value %x is none of those given", got[0].Value)
	}
	for i, c := range got {
		if !bytes.Equal(c.Value, got[0].Value) || !c.MadeAt.Equal(got[0].MadeAt) {
			t.Fatalf("call %d got %x made %v; call 0 got %x made %v", i, c.Value, c.MadeAt, got[0].Value, got[0].MadeAt)
		}
	}
	if m := got[0].MadeAt; m.Before(before) || m.After(time.Now().Add(time.Second)) {
		t.Fatalf("check value made at %v, want about now", m)
	}
	again, err := e.KeepSecretCheck(ctx, []byte("another-check-value-entirely-32b"))
	if err != nil || !bytes.Equal(again.Value, got[0].Value) {
		t.Fatalf("a later KeepSecretCheck: %x, %v; want the kept %x", again.Value, err, got[0].Value)
	}
}
