package embedded

import (
	"context"

	"github.com/idemgate/idemgate/store"
)

// NotDone records a "not done" execution under its claim: released, or
// held as retries exhausted once the budget is used up (see
// store.Store.NotDone and store.Stored.AnswerNotDone).
func (e *Engine) NotDone(ctx context.Context, req store.NotDoneRequest) (store.NotDoneOutcome, error) {
	req, err := store.CheckNotDone(req)
	if err != nil {
		return store.NotDoneLost, err
	}
	outcome := store.NotDoneLost
	_, err = e.settled(req.ID)(e.change(ctx, "not done", req.ID, synced, func(cur *rec, now int64) *rec {
		var r *rec
		r, outcome = cur.AnswerNotDone(now, req)
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
	return e.audited(ctx, store.AuditRun, req.ID, req.Act, retention{}, func(cur *rec, now int64) (*rec, error) {
		return cur.Redrive(now, req)
	})
}
