package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store"
)

func init() {
	register(
		test{"OperatorRelease", testOperatorRelease},
		test{"OperatorComplete", testOperatorComplete},
		test{"OperatorAudit", testOperatorAudit},
		test{"OperatorArguments", testOperatorArguments},
		test{"OperatorVsConcurrentClaims", testOperatorVsConcurrentClaims},
	)
}

var act = store.Action{Actor: "admin-api", Reason: "checked with the CRM"}

// setup puts a fresh record into one state and returns its id and the
// claimant's token.
type setup struct {
	name string
	make func(t *testing.T, h Harness, e store.Engine) (id, token string)
}

var operatorSetups = map[string]setup{
	"absent": {"absent", func(t *testing.T, h Harness, e store.Engine) (string, string) { return NewID(t), "" }},
	"in_flight": {"in_flight (live)", func(t *testing.T, h Harness, e store.Engine) (string, string) {
		id := NewID(t)
		MustClaim(t, e, ClaimReq(id, "tok-A"))
		return id, "tok-A"
	}},
	"expired": {"in_flight (lease run out)", func(t *testing.T, h Harness, e store.Engine) (string, string) {
		id := NewID(t)
		req := ClaimReq(id, "tok-A")
		req.Lease = 300 * time.Millisecond
		WaitPast(t, h, e, MustClaim(t, e, req).Record.LeaseUntil)
		return id, "tok-A"
	}},
	"completed": {"completed", func(t *testing.T, h Harness, e store.Engine) (string, string) {
		id := NewID(t)
		MustClaim(t, e, ClaimReq(id, "tok-A"))
		ok, err := complete(e, id, "tok-A", SampleResult(), time.Hour)
		MustOK(t, "Complete", ok, err)
		return id, "tok-A"
	}},
	"unknown": {"outcome_unknown", func(t *testing.T, h Harness, e store.Engine) (string, string) {
		id := NewID(t)
		MustClaim(t, e, ClaimReq(id, "tok-A"))
		ok, err := e.MarkUnknown(context.Background(), id, "tok-A", "upstream_5xx", time.Hour)
		MustOK(t, "MarkUnknown", ok, err)
		return id, "tok-A"
	}},
	"released": {"released", func(t *testing.T, h Harness, e store.Engine) (string, string) {
		id := NewID(t)
		MustClaim(t, e, ClaimReq(id, "tok-A"))
		ok, err := e.Release(context.Background(), id, "tok-A", time.Hour)
		MustOK(t, "Release", ok, err)
		return id, "tok-A"
	}},
}

// checkFencedOut asserts that every fenced call with the old token loses
// and leaves the record as it was.
func checkFencedOut(t *testing.T, e store.Engine, id, token string) {
	t.Helper()
	ctx := context.Background()
	before := MustGet(t, e, id)
	ok, err := complete(e, id, token, store.Result{Status: 500}, time.Hour)
	MustLose(t, "Complete by the old claimant", ok, err)
	ok, err = e.Release(ctx, id, token, time.Hour)
	MustLose(t, "Release by the old claimant", ok, err)
	ok, err = e.MarkUnknown(ctx, id, token, "upstream_timeout", time.Hour)
	MustLose(t, "MarkUnknown by the old claimant", ok, err)
	ok, err = e.Renew(ctx, id, token, time.Hour)
	MustLose(t, "Renew by the old claimant", ok, err)
	if after := MustGet(t, e, id); !reflect.DeepEqual(after, before) {
		t.Fatalf("the old claimant changed the record:\n got %+v\nwant %+v", after, before)
	}
}

// checkListed asserts that listing by state finds id under want only.
func checkListed(t *testing.T, e store.Engine, id string, want store.State) {
	t.Helper()
	for _, st := range store.IndexStates() {
		found := false
		for _, r := range ListEvery(t, e, store.ListFilter{State: st, Limit: 1000}) {
			if r.ID == id {
				found = true
			}
		}
		if found != (st == want) {
			t.Fatalf("record %s listed under %s: %v; want it under %s only", id, st, found, want)
		}
	}
}

func testOperatorRelease(t *testing.T, h Harness, e store.Engine) {
	cases := []struct {
		setup   string
		wantErr error
	}{
		{"absent", store.ErrNotFound},
		{"in_flight", store.ErrConflict},
		{"expired", nil},
		{"completed", nil},
		{"unknown", nil},
		{"released", nil},
	}
	ctx := context.Background()
	for _, tc := range cases {
		su := operatorSetups[tc.setup]
		t.Run(su.name, func(t *testing.T) {
			id, token := su.make(t, h, e)
			var before *store.Record
			if tc.setup != "absent" {
				before = MustGet(t, e, id)
			}
			rec, err := e.OperatorRelease(ctx, id, act, 3*time.Hour)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), id) {
					t.Fatalf("err = %v, want %v naming the record", err, tc.wantErr)
				}
				if tc.wantErr == store.ErrConflict {
					if !reflect.DeepEqual(rec, before) {
						t.Fatalf("conflict returned %+v, want the unchanged record %+v", rec, before)
					}
					if got := MustGet(t, e, id); !reflect.DeepEqual(got, before) {
						t.Fatalf("conflict changed the record: %+v", got)
					}
				} else if rec != nil {
					t.Fatalf("not found returned a record: %+v", rec)
				}
				return
			}
			if err != nil {
				t.Fatalf("OperatorRelease: %v", err)
			}
			if rec.State != store.StateReleased || rec.Reason != "operator" || rec.Token == "" || rec.Token == token ||
				rec.Status != 0 || rec.Body != nil || rec.Header != nil || rec.Digest != "" || rec.ExternalID != "" ||
				!rec.CompletedAt.IsZero() || rec.Attempts != before.Attempts || rec.Executions != before.Executions {
				t.Fatalf("released record %+v (before %+v)", rec, before)
			}
			if got := MustGet(t, e, id); !reflect.DeepEqual(got, rec) {
				t.Fatalf("returned record differs from the stored one:\n got %+v\nwant %+v", rec, got)
			}
			checkListed(t, e, id, store.StateReleased)
			CheckTTL(t, h, e, id, 3*time.Hour)
			checkFencedOut(t, e, id, token)

			// Releasing again is harmless (an operator's retried request).
			if _, err := e.OperatorRelease(ctx, id, act, 3*time.Hour); err != nil {
				t.Fatalf("second OperatorRelease: %v", err)
			}
			// The next retry with the same payload executes once more.
			res := MustClaim(t, e, ClaimReq(id, "tok-retry"))
			if !res.Claimed || !res.TakeOver || res.Record.Executions != before.Executions+1 {
				t.Fatalf("retry after the release: Claimed=%v TakeOver=%v record %+v", res.Claimed, res.TakeOver, res.Record)
			}
			if dup := MustClaim(t, e, ClaimReq(id, "tok-dup")); dup.Claimed {
				t.Fatalf("a second retry also executes: %+v", dup.Record)
			}
		})
	}
}

func testOperatorComplete(t *testing.T, h Harness, e store.Engine) {
	cases := []struct {
		setup   string
		wantErr error
	}{
		{"absent", store.ErrNotFound},
		{"in_flight", store.ErrConflict},
		{"completed", store.ErrConflict},
		{"expired", nil},
		{"unknown", nil},
		{"released", nil},
	}
	body := []byte(`{"id":"D-9021","status":"created"}`)
	sum := sha256.Sum256(body)
	res := store.Result{
		Status:     201,
		Header:     http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}},
		Body:       body,
		ExternalID: "D-9021",
	}
	ctx := context.Background()
	for _, tc := range cases {
		su := operatorSetups[tc.setup]
		t.Run(su.name, func(t *testing.T) {
			id, token := su.make(t, h, e)
			var before *store.Record
			if tc.setup != "absent" {
				before = MustGet(t, e, id)
			}
			rec, err := e.OperatorComplete(ctx, id, res, act, 5*time.Hour)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), id) {
					t.Fatalf("err = %v, want %v naming the record", err, tc.wantErr)
				}
				if got, _ := e.Get(ctx, id); !reflect.DeepEqual(got, before) {
					t.Fatalf("a refused OperatorComplete changed the record: %+v", got)
				}
				if tc.wantErr == store.ErrConflict && !reflect.DeepEqual(rec, before) {
					t.Fatalf("conflict returned %+v, want the current record", rec)
				}
				return
			}
			if err != nil {
				t.Fatalf("OperatorComplete: %v", err)
			}
			if rec.State != store.StateCompleted || rec.Reason != "operator" || rec.Token == "" || rec.Token == token ||
				rec.Status != 201 || string(rec.Body) != string(body) || !reflect.DeepEqual(rec.Header, res.Header) ||
				rec.Digest != hex.EncodeToString(sum[:]) || rec.ExternalID != "D-9021" || rec.BodyOmitted ||
				rec.CompletedAt.Before(before.StartedAt) || rec.Attempts != before.Attempts || rec.Executions != before.Executions {
				t.Fatalf("completed record %+v (before %+v)", rec, before)
			}
			checkListed(t, e, id, store.StateCompleted)
			CheckTTL(t, h, e, id, 5*time.Hour)
			checkFencedOut(t, e, id, token)

			// Later retries replay the operator's outcome.
			replay := MustClaim(t, e, ClaimReq(id, "tok-retry"))
			if replay.Claimed || replay.Record.State != store.StateCompleted || string(replay.Record.Body) != string(body) ||
				replay.Record.Executions != before.Executions {
				t.Fatalf("retry after the completion: Claimed=%v record %+v", replay.Claimed, replay.Record)
			}
			// A second completion is refused: the outcome is recorded.
			if _, err := e.OperatorComplete(ctx, id, res, act, time.Hour); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("second OperatorComplete: %v, want ErrConflict", err)
			}
		})
	}

	t.Run("digest kept or computed", func(t *testing.T) {
		for _, r := range []struct {
			res  store.Result
			want string
		}{
			{store.Result{Status: 200, Body: body, Digest: "given"}, "given"},
			{store.Result{Status: 200, Body: body}, hex.EncodeToString(sum[:])},
			{store.Result{Status: 204}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
			{store.Result{Status: 200, BodyOmitted: true}, ""},
		} {
			id, _ := operatorSetups["unknown"].make(t, h, e)
			rec, err := e.OperatorComplete(ctx, id, r.res, act, time.Hour)
			if err != nil || rec.Digest != r.want || rec.BodyOmitted != r.res.BodyOmitted {
				t.Fatalf("OperatorComplete(%+v) = %+v, %v; want digest %q", r.res, rec, err, r.want)
			}
		}
	})
}

// testOperatorAudit: every operator action lands on the record's audit
// trail in the same step, with who, why and the store's clock; a refused
// action leaves no entry, and the trail outlives later claims.
func testOperatorAudit(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id, _ := operatorSetups["unknown"].make(t, h, e)
	before := h.Now(t, e).Truncate(time.Millisecond)
	rel, err := e.OperatorRelease(ctx, id, store.Action{Actor: "alice", Reason: "the CRM has no deal"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(rel.Audit) != 1 {
		t.Fatalf("audit after a release: %+v", rel.Audit)
	}
	a := rel.Audit[0]
	if a.Actor != "alice" || a.Action != "release" || a.Reason != "the CRM has no deal" || a.At.Before(before) {
		t.Fatalf("audit entry %+v", a)
	}
	claim := MustClaim(t, e, ClaimReq(id, "tok-retry"))
	if !claim.Claimed || len(claim.Record.Audit) != 1 {
		t.Fatalf("the retry's claim: %+v", claim.Record)
	}
	if _, err := e.OperatorComplete(ctx, id, SampleResult(), store.Action{Actor: "bob"}, time.Hour); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("OperatorComplete of a live claim: %v", err)
	}
	ok, err := e.MarkUnknown(ctx, id, "tok-retry", "upstream_5xx", time.Hour)
	MustOK(t, "MarkUnknown", ok, err)
	done, err := e.OperatorComplete(ctx, id, SampleResult(), store.Action{Actor: "bob", Reason: "deal D-1 exists"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.AuditEntry{a, {At: done.Audit[len(done.Audit)-1].At, Actor: "bob", Action: "complete", Reason: "deal D-1 exists"}}
	if !reflect.DeepEqual(done.Audit, want) || done.Audit[1].At.Before(a.At) {
		t.Fatalf("audit %+v, want %+v", done.Audit, want)
	}
	if got := MustGet(t, e, id); !reflect.DeepEqual(got.Audit, want) {
		t.Fatalf("stored audit %+v", got.Audit)
	}
}

func testOperatorArguments(t *testing.T, h Harness, e store.Engine) {
	ctx := context.Background()
	id := "0123456789abcdef0123456789abcdef"
	for _, status := range []int{0, 99, 600, -1} {
		if _, err := e.OperatorComplete(ctx, id, store.Result{Status: status}, act, time.Hour); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("status %d: err = %v, want ErrInvalidArgument", status, err)
		}
	}
	long := store.Result{Status: 200, ExternalID: strings.Repeat("x", store.MaxExternalID+1)}
	if _, err := e.OperatorComplete(ctx, id, long, act, time.Hour); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("external id of %d bytes: err = %v, want ErrInvalidArgument", len(long.ExternalID), err)
	}
	if _, err := e.OperatorComplete(ctx, "a}b", store.Result{Status: 200}, act, time.Hour); !errors.Is(err, store.ErrInvalidID) {
		t.Errorf("bad id: %v", err)
	}
	if _, err := e.OperatorRelease(ctx, "", act, time.Hour); !errors.Is(err, store.ErrInvalidID) {
		t.Errorf("empty id: %v", err)
	}
	if _, err := e.OperatorRelease(ctx, id, act, -time.Second); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("negative TTL: %v", err)
	}
}

// testOperatorVsConcurrentClaims races an operator's resolution of a
// record against 50 retries arriving at the same moment, many times: at
// most one retry executes, and the record ends consistent with the order
// the steps ran in.
func testOperatorVsConcurrentClaims(t *testing.T, h Harness, e store.Engine) {
	const claimants, rounds = 50, 10
	race := func(t *testing.T, id string, op func() error) (claimed []store.ClaimResult, opErr error) {
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			mu    sync.Mutex
		)
		for i := range claimants {
			wg.Go(func() {
				<-start
				res, err := e.Claim(context.Background(), ClaimReq(id, fmt.Sprintf("tok-%02d", i)))
				if err != nil {
					t.Errorf("claim %d: %v", i, err)
					return
				}
				if res.Claimed {
					mu.Lock()
					claimed = append(claimed, res)
					mu.Unlock()
				}
			})
		}
		wg.Go(func() {
			<-start
			opErr = op()
		})
		close(start)
		wg.Wait()
		return claimed, opErr
	}
	ctx := context.Background()
	t.Run("release of a held record", func(t *testing.T) {
		for range rounds {
			id, _ := operatorSetups["unknown"].make(t, h, e)
			claimed, err := race(t, id, func() error {
				_, err := e.OperatorRelease(ctx, id, act, time.Hour)
				return err
			})
			if err != nil {
				t.Fatalf("OperatorRelease: %v", err)
			}
			r := MustGet(t, e, id)
			switch len(claimed) {
			case 0: // every retry ran before the release
				if r.State != store.StateReleased || r.Executions != 1 {
					t.Fatalf("no retry executed, record %+v", r)
				}
			case 1:
				if r.State != store.StateInFlight || r.Executions != 2 || r.Token != claimed[0].Record.Token || !claimed[0].TakeOver {
					t.Fatalf("one retry executed, record %+v", r)
				}
			default:
				t.Fatalf("%d retries executed after one release", len(claimed))
			}
			if r.Attempts != claimants+1 {
				t.Fatalf("attempts %d, want %d", r.Attempts, claimants+1)
			}
		}
	})
	t.Run("complete of a released record", func(t *testing.T) {
		for range rounds {
			id, _ := operatorSetups["released"].make(t, h, e)
			claimed, err := race(t, id, func() error {
				_, err := e.OperatorComplete(ctx, id, SampleResult(), act, time.Hour)
				return err
			})
			r := MustGet(t, e, id)
			switch len(claimed) {
			case 0: // the operator came first: every retry replays
				if err != nil || r.State != store.StateCompleted || r.Reason != "operator" || r.Executions != 1 {
					t.Fatalf("no retry executed: err %v, record %+v", err, r)
				}
			case 1: // a retry came first: the operator sees its live claim
				if !errors.Is(err, store.ErrConflict) || r.State != store.StateInFlight || r.Executions != 2 {
					t.Fatalf("one retry executed: err %v, record %+v", err, r)
				}
			default:
				t.Fatalf("%d retries executed", len(claimed))
			}
		}
	})
}
