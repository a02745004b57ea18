package store

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestStoredRules runs each shared rule on a record and checks the state
// it moves to, and that the record it was given is left as it was (the
// engines keep it when a write fails).
func TestStoredRules(t *testing.T) {
	const now = int64(1_700_000_000_000)
	held := func() *Stored {
		return &Stored{
			Record: Record{
				ID: "k", State: StateUnknown, Token: "claim", Result: Result{Status: 201, Body: []byte("x")},
				Check:   Check{URL: "http://127.0.0.1/x", After: time.Second},
				Audit:   make([]AuditEntry, 0, 4),
				Checks:  make([]CheckEntry, 0, 4),
				Answers: make([]Answer, 0, 4),
			},
			ExpireAt: now + 1000,
		}
	}
	leased := func() *Stored {
		s := held()
		s.CheckToken, s.CheckLeaseUntil = "check", time.UnixMilli(now+500)
		return s
	}
	tests := []struct {
		name   string
		cur    *Stored
		rule   func(*Stored) (*Stored, error)
		state  State
		reason string
		err    error // the refusal; nil next without one: no change
	}{
		{"release", held(), func(s *Stored) (*Stored, error) { return s.Release(now, "claim", time.Hour), nil },
			StateReleased, ReasonNotDone, nil},
		{"release by another claim", held(), func(s *Stored) (*Stored, error) { return s.Release(now, "other", time.Hour), nil },
			"", "", nil},
		{"release of no record", nil, func(s *Stored) (*Stored, error) { return s.Release(now, "claim", time.Hour), nil },
			"", "", nil},
		{"mark unknown", held(), func(s *Stored) (*Stored, error) { return s.MarkUnknown(now, "claim", "timeout", time.Hour), nil },
			StateUnknown, "timeout", nil},
		{"operator release", held(), func(s *Stored) (*Stored, error) { return s.OperatorRelease(now, time.Hour) },
			StateReleased, ReasonOperator, nil},
		{"operator release under a check", leased(), func(s *Stored) (*Stored, error) { return s.OperatorRelease(now, time.Hour) },
			"", "", ErrConflict},
		{"operator complete", held(), func(s *Stored) (*Stored, error) {
			return s.OperatorComplete(now, Result{Status: 200}, time.Hour)
		}, StateCompleted, ReasonOperator, nil},
		{"begin check", held(), func(s *Stored) (*Stored, error) {
			next, _ := s.BeginCheck(now, "claim", "check", time.Second, false)
			return next, nil
		}, StateUnknown, "", nil},
		{"end check applied", leased(), func(s *Stored) (*Stored, error) {
			o, err := CheckEndCheck(CheckOutcome{ID: "k", ClaimToken: "claim", CheckToken: "check", CheckReport: CheckReport{
				Entry: CheckEntry{Status: 200, Verdict: VerdictApplied}, Result: Result{Status: 200}, NotFoundChecks: 1,
			}})
			if err != nil {
				return nil, err
			}
			next, _ := s.EndCheck(now, o)
			return next, nil
		}, StateCompleted, ReasonVerified, nil},
		{"end check not applied", leased(), func(s *Stored) (*Stored, error) {
			next, _ := s.EndCheck(now, CheckOutcome{ID: "k", ClaimToken: "claim", CheckToken: "check", CheckReport: CheckReport{
				Entry: CheckEntry{Status: 404, Verdict: VerdictNotApplied}, NotFoundChecks: 1,
			}})
			return next, nil
		}, StateReleased, ReasonVerifiedNotApplied, nil},
		{"not done exhausts the budget", held(), func(s *Stored) (*Stored, error) {
			next, _ := s.AnswerNotDone(now, NotDoneRequest{ID: "k", Token: "claim", Status: 503, MaxExecutions: 1})
			return next, nil
		}, StateUnknown, ReasonRetriesExhausted, nil},
		{"not done releases", held(), func(s *Stored) (*Stored, error) {
			next, _ := s.AnswerNotDone(now, NotDoneRequest{ID: "k", Token: "claim", Status: 503})
			return next, nil
		}, StateReleased, ReasonNotDone, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before *Stored
			if tt.cur != nil {
				before = tt.cur.Clone()
			}
			next, err := tt.rule(tt.cur)
			if !errors.Is(err, tt.err) || (tt.err != nil) != (err != nil) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			if !reflect.DeepEqual(tt.cur, before) {
				t.Fatalf("the rule changed its receiver:\n got %+v\nwant %+v", tt.cur, before)
			}
			if tt.state == "" {
				if next != nil {
					t.Fatalf("changed to %+v, want no change", next)
				}
				return
			}
			if next == nil {
				t.Fatal("no change")
			}
			if next.State != tt.state || next.Reason != tt.reason {
				t.Fatalf("state %q reason %q, want %q %q", next.State, next.Reason, tt.state, tt.reason)
			}
		})
	}
}
