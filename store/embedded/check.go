package embedded

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Verification checks: the rules are store.Stored's BeginCheck and
// EndCheck (see store.Engine.BeginCheck and EndCheck).

// BeginCheck takes record id's check lease for lease.
func (e *Engine) BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*store.Record, bool, error) {
	if err := store.ValidateBeginCheck(id, claimToken, checkToken, lease); err != nil {
		return nil, false, err
	}
	return e.checkChange(ctx, "begin check", id, 0, func(cur *rec, now int64) (*rec, bool) {
		return cur.BeginCheck(now, claimToken, checkToken, lease, due)
	})
}

// EndCheck records a check under its lease and applies its verdict.
func (e *Engine) EndCheck(ctx context.Context, o store.CheckOutcome) (*store.Record, bool, error) {
	o, err := store.CheckEndCheck(o)
	if err != nil {
		return nil, false, err
	}
	return e.checkChange(ctx, "end check", o.ID, store.Millis(o.Tombstone), func(cur *rec, now int64) (*rec, bool) {
		return cur.EndCheck(now, o)
	})
}

// checkChange runs a check's change of an existing record: f returns the
// new record (nil: none) and whether the call succeeds. It returns the
// record as left, once on disk.
// A change that completes the record leaves a tombstone of tomb ms (0: none).
func (e *Engine) checkChange(ctx context.Context, op, id string, tomb int64, f func(cur *rec, now int64) (*rec, bool)) (*store.Record, bool, error) {
	ok := false
	out, _, err := e.update(ctx, op, id, func(cur *rec, now int64) mutation {
		if cur == nil {
			return mutation{}
		}
		var r *rec
		r, ok = f(cur, now)
		m := mutation{next: r, dur: synced}
		if r != nil && r.State == store.StateCompleted {
			m.ret.tomb = tomb
		}
		return m
	})
	if err != nil || out == nil {
		return nil, false, err
	}
	return out.View(), ok, nil
}
