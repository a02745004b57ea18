package store

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
)

// testAction is the operator action the tests resolve records with.
var testAction = Action{Actor: "alice", Reason: "checked the CRM: no deal"}

// checkAudit asserts that rec's audit trail ends with want (At aside) and
// that its last entry took effect between after and the record's own
// clock-bounded present.
func checkAudit(t *testing.T, rec *Record, after time.Time, want ...AuditEntry) {
	t.Helper()
	if len(rec.Audit) != len(want) {
		t.Fatalf("audit has %d entries, want %d: %+v", len(rec.Audit), len(want), rec.Audit)
	}
	for i, w := range want {
		got := rec.Audit[i]
		if got.Actor != w.Actor || got.Action != w.Action || got.Reason != w.Reason {
			t.Fatalf("audit[%d] = %+v, want %+v", i, got, w)
		}
	}
	// The store's clock may differ from the test's by a few ms (miniredis
	// and redis-server run on this machine): allow a second.
	last := rec.Audit[len(rec.Audit)-1].At
	if last.Before(after.Add(-time.Second)) || last.After(time.Now().Add(time.Second)) {
		t.Fatalf("last audit entry at %v, want after %v and not in the future", last, after)
	}
}

// setup puts a fresh record into one state and returns its id and the
// claimant's token.
type setup struct {
	name string
	make func(t *testing.T, s *Store) (id, token string)
}

var operatorSetups = map[string]setup{
	"absent": {"absent", func(t *testing.T, s *Store) (string, string) { return newID(t), "" }},
	"in_flight": {"in_flight (live)", func(t *testing.T, s *Store) (string, string) {
		id := newID(t)
		mustClaim(t, s, claimReq(id, "tok-A"))
		return id, "tok-A"
	}},
	"expired": {"in_flight (lease run out)", func(t *testing.T, s *Store) (string, string) {
		id := newID(t)
		req := claimReq(id, "tok-A")
		req.Lease = 300 * time.Millisecond
		waitPast(t, s, mustClaim(t, s, req).Record.LeaseUntil)
		return id, "tok-A"
	}},
	"completed": {"completed", func(t *testing.T, s *Store) (string, string) {
		id := newID(t)
		mustClaim(t, s, claimReq(id, "tok-A"))
		ok, err := s.Complete(context.Background(), completion(id, "tok-A", sampleResult(), time.Hour))
		mustOK(t, "Complete", ok, err)
		return id, "tok-A"
	}},
	"unknown": {"outcome_unknown", func(t *testing.T, s *Store) (string, string) {
		id := newID(t)
		mustClaim(t, s, claimReq(id, "tok-A"))
		ok, err := s.MarkUnknown(context.Background(), id, "tok-A", "upstream_5xx", time.Hour)
		mustOK(t, "MarkUnknown", ok, err)
		return id, "tok-A"
	}},
	"released": {"released", func(t *testing.T, s *Store) (string, string) {
		id := newID(t)
		mustClaim(t, s, claimReq(id, "tok-A"))
		ok, err := s.Release(context.Background(), id, "tok-A", time.Hour)
		mustOK(t, "Release", ok, err)
		return id, "tok-A"
	}},
}

// checkFencedOut asserts that every fenced call with the old token loses
// and leaves the record as it was.
func checkFencedOut(t *testing.T, s *Store, id, token string) {
	t.Helper()
	ctx := context.Background()
	before := mustGet(t, s, id)
	ok, err := s.Complete(ctx, completion(id, token, Result{Status: 500}, time.Hour))
	mustLose(t, "Complete by the old claimant", ok, err)
	ok, err = s.Release(ctx, id, token, time.Hour)
	mustLose(t, "Release by the old claimant", ok, err)
	ok, err = s.MarkUnknown(ctx, id, token, "upstream_timeout", time.Hour)
	mustLose(t, "MarkUnknown by the old claimant", ok, err)
	ok, err = s.Renew(ctx, id, token, time.Hour)
	mustLose(t, "Renew by the old claimant", ok, err)
	if after := mustGet(t, s, id); !reflect.DeepEqual(after, before) {
		t.Fatalf("the old claimant changed the record:\n got %+v\nwant %+v", after, before)
	}
}

func TestOperatorRelease(t *testing.T) {
	cases := []struct {
		setup   string
		wantErr error
	}{
		{"absent", ErrNotFound},
		{"in_flight", ErrConflict},
		{"expired", nil},
		{"completed", nil},
		{"unknown", nil},
		{"released", nil},
	}
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, tc := range cases {
			su := operatorSetups[tc.setup]
			t.Run(su.name, func(t *testing.T) {
				id, token := su.make(t, e.s)
				var before *Record
				if tc.setup != "absent" {
					before = mustGet(t, e.s, id)
				}
				rec, err := e.s.OperatorRelease(ctx, id, testAction, 3*time.Hour)
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), id) {
						t.Fatalf("err = %v, want %v naming the record", err, tc.wantErr)
					}
					if tc.wantErr == ErrConflict {
						if !reflect.DeepEqual(rec, before) {
							t.Fatalf("conflict returned %+v, want the unchanged record %+v", rec, before)
						}
						if got := mustGet(t, e.s, id); !reflect.DeepEqual(got, before) {
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
				if rec.State != StateReleased || rec.Reason != "operator" || rec.Token == "" || rec.Token == token ||
					rec.Status != 0 || rec.Body != nil || rec.Header != nil || rec.Digest != "" || rec.ExternalID != "" ||
					!rec.CompletedAt.IsZero() || rec.Attempts != before.Attempts || rec.Executions != before.Executions {
					t.Fatalf("released record %+v (before %+v)", rec, before)
				}
				if got := mustGet(t, e.s, id); !reflect.DeepEqual(got, rec) {
					t.Fatalf("returned record differs from the stored one:\n got %+v\nwant %+v", rec, got)
				}
				entry := AuditEntry{Actor: testAction.Actor, Action: AuditRelease, Reason: testAction.Reason}
				checkAudit(t, rec, before.StartedAt, entry)
				checkIndexed(t, e.s, id, StateReleased, 3*time.Hour)
				checkFencedOut(t, e.s, id, token)

				// Releasing again is harmless (an operator's retried request)
				// and is kept as a second entry.
				again, err := e.s.OperatorRelease(ctx, id, Action{Actor: "bob"}, 3*time.Hour)
				if err != nil {
					t.Fatalf("second OperatorRelease: %v", err)
				}
				checkAudit(t, again, rec.Audit[0].At, entry, AuditEntry{Actor: "bob", Action: AuditRelease})
				// The next retry with the same payload executes once more.
				res := mustClaim(t, e.s, claimReq(id, "tok-retry"))
				if !res.Claimed || !res.TakeOver || res.Record.Executions != before.Executions+1 {
					t.Fatalf("retry after the release: Claimed=%v TakeOver=%v record %+v", res.Claimed, res.TakeOver, res.Record)
				}
				if dup := mustClaim(t, e.s, claimReq(id, "tok-dup")); dup.Claimed {
					t.Fatalf("a second retry also executes: %+v", dup.Record)
				}
				// The trail outlives the retry's execution and result.
				ok, err := e.s.Complete(ctx, completion(id, "tok-retry", sampleResult(), time.Hour))
				mustOK(t, "Complete by the retry", ok, err)
				if got := mustGet(t, e.s, id); len(got.Audit) != 2 || got.Audit[1].Actor != "bob" {
					t.Fatalf("audit after the retry completed: %+v", got.Audit)
				}
			})
		}
	})
}

func TestOperatorComplete(t *testing.T) {
	cases := []struct {
		setup   string
		wantErr error
	}{
		{"absent", ErrNotFound},
		{"in_flight", ErrConflict},
		{"completed", ErrConflict},
		{"expired", nil},
		{"unknown", nil},
		{"released", nil},
	}
	body := []byte(`{"id":"D-9021","status":"created"}`)
	sum := sha256.Sum256(body)
	res := Result{
		Status:     201,
		Header:     http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}},
		Body:       body,
		ExternalID: "D-9021",
	}
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, tc := range cases {
			su := operatorSetups[tc.setup]
			t.Run(su.name, func(t *testing.T) {
				id, token := su.make(t, e.s)
				var before *Record
				if tc.setup != "absent" {
					before = mustGet(t, e.s, id)
				}
				rec, err := e.s.OperatorComplete(ctx, id, res, testAction, 5*time.Hour)
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), id) {
						t.Fatalf("err = %v, want %v naming the record", err, tc.wantErr)
					}
					if got, _ := e.s.Get(ctx, id); !reflect.DeepEqual(got, before) {
						t.Fatalf("a refused OperatorComplete changed the record: %+v", got)
					}
					if tc.wantErr == ErrConflict && !reflect.DeepEqual(rec, before) {
						t.Fatalf("conflict returned %+v, want the current record", rec)
					}
					return
				}
				if err != nil {
					t.Fatalf("OperatorComplete: %v", err)
				}
				if rec.State != StateCompleted || rec.Reason != "operator" || rec.Token == "" || rec.Token == token ||
					rec.Status != 201 || string(rec.Body) != string(body) || !reflect.DeepEqual(rec.Header, res.Header) ||
					rec.Digest != hex.EncodeToString(sum[:]) || rec.ExternalID != "D-9021" || rec.BodyOmitted ||
					rec.CompletedAt.Before(before.StartedAt) || rec.Attempts != before.Attempts || rec.Executions != before.Executions {
					t.Fatalf("completed record %+v (before %+v)", rec, before)
				}
				checkAudit(t, rec, before.StartedAt,
					AuditEntry{Actor: testAction.Actor, Action: AuditComplete, Reason: testAction.Reason})
				if got := mustGet(t, e.s, id); !reflect.DeepEqual(got, rec) {
					t.Fatalf("returned record differs from the stored one:\n got %+v\nwant %+v", rec, got)
				}
				checkIndexed(t, e.s, id, StateCompleted, 5*time.Hour)
				checkFencedOut(t, e.s, id, token)

				// Later retries replay the operator's outcome.
				replay := mustClaim(t, e.s, claimReq(id, "tok-retry"))
				if replay.Claimed || replay.Record.State != StateCompleted || string(replay.Record.Body) != string(body) ||
					replay.Record.Executions != before.Executions {
					t.Fatalf("retry after the completion: Claimed=%v record %+v", replay.Claimed, replay.Record)
				}
				// A second completion is refused: the outcome is recorded.
				if again, err := e.s.OperatorComplete(ctx, id, res, testAction, time.Hour); !errors.Is(err, ErrConflict) || len(again.Audit) != 1 {
					t.Fatalf("second OperatorComplete: %v, want ErrConflict and no second audit entry (%+v)", err, again)
				}
			})
		}

		t.Run("digest kept or computed", func(t *testing.T) {
			for _, r := range []struct {
				res  Result
				want string
			}{
				{Result{Status: 200, Body: body, Digest: "given"}, "given"},
				{Result{Status: 200, Body: body}, hex.EncodeToString(sum[:])},
				{Result{Status: 204}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
				{Result{Status: 200, BodyOmitted: true}, ""},
			} {
				id, _ := operatorSetups["unknown"].make(t, e.s)
				rec, err := e.s.OperatorComplete(ctx, id, r.res, testAction, time.Hour)
				if err != nil || rec.Digest != r.want || rec.BodyOmitted != r.res.BodyOmitted {
					t.Fatalf("OperatorComplete(%+v) = %+v, %v; want digest %q", r.res, rec, err, r.want)
				}
			}
		})
	})
}

func TestOperatorArguments(t *testing.T) {
	s := New(nil, "", 0) // never reaches Redis
	ctx := context.Background()
	id := "0123456789abcdef0123456789abcdef"
	for _, status := range []int{0, 99, 600, -1} {
		if _, err := s.OperatorComplete(ctx, id, Result{Status: status}, testAction, time.Hour); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("status %d: err = %v, want ErrInvalidArgument", status, err)
		}
	}
	if _, err := s.OperatorComplete(ctx, "a}b", Result{Status: 200}, testAction, time.Hour); !errors.Is(err, ErrInvalidID) {
		t.Errorf("bad id: %v", err)
	}
	if _, err := s.OperatorRelease(ctx, "", testAction, time.Hour); !errors.Is(err, ErrInvalidID) {
		t.Errorf("empty id: %v", err)
	}
	if _, err := s.OperatorRelease(ctx, id, testAction, -time.Second); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("negative TTL: %v", err)
	}
}

// TestOperatorAudit: the trail keeps the last MaxAuditEntries actions,
// oldest first, and any text in them round trips.
func TestOperatorAudit(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		t.Run("bounded", func(t *testing.T) {
			id, _ := operatorSetups["unknown"].make(t, e.s)
			const n = MaxAuditEntries + 7
			var rec *Record
			for i := range n {
				var err error
				if rec, err = e.s.OperatorRelease(ctx, id, Action{Actor: "op", Reason: fmt.Sprint(i)}, time.Hour); err != nil {
					t.Fatalf("release %d: %v", i, err)
				}
			}
			if len(rec.Audit) != MaxAuditEntries {
				t.Fatalf("%d entries kept, want %d", len(rec.Audit), MaxAuditEntries)
			}
			for i, a := range rec.Audit {
				if want := fmt.Sprint(n - MaxAuditEntries + i); a.Reason != want {
					t.Fatalf("entry %d has reason %q, want %q (the oldest are dropped)", i, a.Reason, want)
				}
				if i > 0 && a.At.Before(rec.Audit[i-1].At) {
					t.Fatalf("entry %d at %v is before entry %d at %v", i, a.At, i-1, rec.Audit[i-1].At)
				}
			}
		})
		t.Run("text round trips", func(t *testing.T) {
			id, _ := operatorSetups["unknown"].make(t, e.s)
			act := Action{Actor: "élise@example.com", Reason: "line one\nline \"two\"\r\n\ttab, {braces}, </script>, ünïcode ✓"}
			if _, err := e.s.OperatorComplete(ctx, id, sampleResult(), act, time.Hour); err != nil {
				t.Fatal(err)
			}
			got := mustGet(t, e.s, id)
			checkAudit(t, got, got.StartedAt, AuditEntry{Actor: act.Actor, Action: AuditComplete, Reason: act.Reason})
		})
		t.Run("refused actions change nothing", func(t *testing.T) {
			id, _ := operatorSetups["unknown"].make(t, e.s)
			before := mustGet(t, e.s, id)
			for _, act := range []Action{
				{},
				{Actor: "", Reason: "who?"},
				{Actor: "a\nb"},
				{Actor: strings.Repeat("a", MaxActorLen+1)},
				{Actor: "op", Reason: strings.Repeat("r", MaxReasonLen+1)},
				{Actor: "op", Reason: "\xff"},
			} {
				if _, err := e.s.OperatorRelease(ctx, id, act, time.Hour); !errors.Is(err, ErrInvalidArgument) {
					t.Errorf("release with %.40q: %v, want ErrInvalidArgument", act, err)
				}
				if _, err := e.s.OperatorComplete(ctx, id, sampleResult(), act, time.Hour); !errors.Is(err, ErrInvalidArgument) {
					t.Errorf("complete with %.40q: %v, want ErrInvalidArgument", act, err)
				}
			}
			if got := mustGet(t, e.s, id); !reflect.DeepEqual(got, before) {
				t.Fatalf("a refused action changed the record: %+v", got)
			}
		})
	})
}

func TestDecodeAuditSkipsForeignLines(t *testing.T) {
	got := decodeAudit(`{"at":1000,"actor":"a","action":"release"}` + "\nnot json\n" + `{"at":2000,"actor":"b"}` + "\n" +
		`{"at":3000,"actor":"c","action":"complete","reason":"r"}`)
	want := []AuditEntry{
		{At: time.UnixMilli(1000), Actor: "a", Action: "release"},
		{At: time.UnixMilli(3000), Actor: "c", Action: "complete", Reason: "r"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeAudit = %+v, want %+v", got, want)
	}
}

// TestOperatorVsConcurrentClaims races an operator's resolution of a record
// against 50 retries arriving at the same moment, many times: at most one
// retry executes, and the record ends consistent with the order the
// scripts ran in.
func TestOperatorVsConcurrentClaims(t *testing.T) {
	const claimants, rounds = 50, 10
	race := func(t *testing.T, s *Store, id string, op func() error) (claimed []ClaimResult, opErr error) {
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			mu    sync.Mutex
		)
		for i := range claimants {
			wg.Go(func() {
				<-start
				res, err := s.Claim(context.Background(), claimReq(id, fmt.Sprintf("tok-%02d", i)))
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
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		t.Run("release of a held record", func(t *testing.T) {
			for range rounds {
				id, _ := operatorSetups["unknown"].make(t, e.s)
				claimed, err := race(t, e.s, id, func() error {
					_, err := e.s.OperatorRelease(ctx, id, testAction, time.Hour)
					return err
				})
				if err != nil {
					t.Fatalf("OperatorRelease: %v", err)
				}
				r := mustGet(t, e.s, id)
				switch len(claimed) {
				case 0: // every retry ran before the release
					if r.State != StateReleased || r.Executions != 1 {
						t.Fatalf("no retry executed, record %+v", r)
					}
				case 1:
					if r.State != StateInFlight || r.Executions != 2 || r.Token != claimed[0].Record.Token || !claimed[0].TakeOver {
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
				id, _ := operatorSetups["released"].make(t, e.s)
				claimed, err := race(t, e.s, id, func() error {
					_, err := e.s.OperatorComplete(ctx, id, sampleResult(), testAction, time.Hour)
					return err
				})
				r := mustGet(t, e.s, id)
				switch len(claimed) {
				case 0: // the operator came first: every retry replays
					if err != nil || r.State != StateCompleted || r.Reason != "operator" || r.Executions != 1 {
						t.Fatalf("no retry executed: err %v, record %+v", err, r)
					}
				case 1: // a retry came first: the operator sees its live claim
					if !errors.Is(err, ErrConflict) || r.State != StateInFlight || r.Executions != 2 {
						t.Fatalf("one retry executed: err %v, record %+v", err, r)
					}
				default:
					t.Fatalf("%d retries executed", len(claimed))
				}
			}
		})
	})
}
