package embedded

import (
	"context"
	"slices"
	"time"

	"github.com/idemgate/idemgate/store"
)

// keptRequest copies a claim's sealed request out of the caller's buffer.
func keptRequest(req []byte) []byte {
	if len(req) == 0 {
		return nil
	}
	return slices.Clone(req)
}

// NotDone records a "not done" execution under its claim: released, or
// held as retries exhausted once the budget is used up (see
// store.Store.NotDone).
func (e *Engine) NotDone(ctx context.Context, req store.NotDoneRequest) (store.NotDoneOutcome, error) {
	req, err := store.CheckNotDone(req)
	if err != nil {
		return store.NotDoneLost, err
	}
	outcome := store.NotDoneLost
	_, err = e.settled(req.ID)(e.change(ctx, "not done", req.ID, synced, func(cur *rec, now int64) *rec {
		if cur == nil || cur.Token != req.Token {
			return nil
		}
		r := cur.clone()
		r.clearResult()
		r.NotDone++
		r.Answers = append(r.Answers, store.Answer{At: time.UnixMilli(now), Status: req.Status})
		if n := len(r.Answers) - store.MaxAnswers; n > 0 {
			r.Answers = r.Answers[n:]
		}
		if req.MaxExecutions > 0 && r.NotDone >= req.MaxExecutions {
			r.State, r.Reason = store.StateUnknown, store.ReasonRetriesExhausted
			r.NextCheck = time.Time{} // known not done: nothing to check
			r.expireAt = now + store.Millis(req.HoldTTL)
			outcome = store.NotDoneExhausted
			return r
		}
		r.State = store.StateReleased
		r.expireAt = now + store.Millis(req.TTL)
		outcome = store.NotDoneReleased
		return r
	}))
	if err != nil {
		return store.NotDoneLost, err
	}
	return outcome, nil
}

// Redrive claims a record for an operator's re-drive (see
// store.Store.Redrive).
func (e *Engine) Redrive(ctx context.Context, req store.RedriveRequest) (*store.Record, error) {
	req, err := store.CheckRedrive(req)
	if err != nil {
		return nil, err
	}
	return e.audited(ctx, store.AuditRun, req.ID, req.Act, func(cur *rec, now int64) (*rec, error) {
		if err := store.RedriveRefusal(&cur.Record, time.UnixMilli(now)); err != nil {
			return nil, err
		}
		r := cur.clone()
		r.clearResult()
		r.State, r.Token = store.StateInFlight, req.Token
		r.StartedAt, r.LeaseUntil = time.UnixMilli(now), time.UnixMilli(now+store.Millis(req.Lease))
		r.Executions++
		r.CheckCount, r.NextCheck, r.NotFoundStreak, r.CheckLeaseUntil = 0, time.Time{}, 0, time.Time{}
		r.checkToken, r.notFoundAt = "", 0
		r.expireAt = now + store.Millis(req.HoldTTL)
		return r, nil
	})
}
