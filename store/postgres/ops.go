package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
)

// The fenced changes of a claim and the operators' changes, each one
// transaction on the record's locked row (see Engine.update): the same
// rules as store.Engine gives, fenced by the token the row carries.

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// get reads record id and the clock; nil when it does not exist or has
// expired.
func (e *Engine) get(ctx context.Context, id string) (*rec, int64, error) {
	var now int64
	r, err := scanRec(e.pool.QueryRow(ctx, e.sql.get, id), &now)
	e.counts.view(r)
	if isNoRows(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if r.ExpireAt <= now {
		return nil, now, nil
	}
	return r, now, nil
}

// Get reads one record; nil, nil when it does not exist.
func (e *Engine) Get(ctx context.Context, id string) (*store.Record, error) {
	if !store.ValidID(id) {
		return nil, store.ErrInvalidID
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	r, _, err := e.get(ctx, id)
	if err != nil {
		return nil, e.opErr("get", id, err)
	}
	if r == nil {
		return nil, nil
	}
	return r.View(), nil
}

// Renew extends a live claim's lease to now+lease: one fenced UPDATE.
func (e *Engine) Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error) {
	lease, err := store.CheckRenew(id, lease)
	if err != nil {
		return false, err
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	tag, err := e.pool.Exec(ctx, "UPDATE "+e.sql.records+" SET lease_until = "+nowSQL+" + $3"+
		" WHERE id = $1 AND token = $2 AND state = 'in_flight' AND expire_at > "+nowSQL, id, token, store.Millis(lease))
	if err != nil {
		return false, e.opErr("renew", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// change runs one fenced change: f returns the new record, or nil to
// leave it alone (false).
func (e *Engine) change(ctx context.Context, op, id string, async, notify bool, f func(cur *rec, now int64) *rec) (bool, error) {
	changed := false
	_, err := e.update(ctx, op, id, func(cur *rec, now int64) mutation {
		r := f(cur, now)
		changed = r != nil
		return mutation{next: r, async: async, notify: notify}
	})
	return changed && err == nil, err
}

// Release marks the record released: the next claim executes again.
func (e *Engine) Release(ctx context.Context, id, token string, ttl time.Duration) (bool, error) {
	ttl, err := store.CheckRelease(id, ttl)
	if err != nil {
		return false, err
	}
	return e.change(ctx, "release", id, false, true, func(cur *rec, now int64) *rec {
		return cur.with(cur.stored().Release(now, token, ttl))
	})
}

// MarkUnknown holds the record as outcome unknown; a completed record is
// never demoted.
func (e *Engine) MarkUnknown(ctx context.Context, id, token, reason string, holdTTL time.Duration) (bool, error) {
	reason, holdTTL, err := store.CheckMarkUnknown(id, reason, holdTTL)
	if err != nil {
		return false, err
	}
	return e.change(ctx, "mark unknown", id, false, true, func(cur *rec, now int64) *rec {
		return cur.with(cur.stored().MarkUnknown(now, token, reason, holdTTL))
	})
}

// OperatorRelease releases a record on an operator's word (see
// store.Engine.OperatorRelease) and appends act to its audit trail.
func (e *Engine) OperatorRelease(ctx context.Context, id string, act store.Action, ttl time.Duration) (*store.Record, error) {
	ttl, err := store.CheckOperatorRelease(ttl)
	if err != nil {
		return nil, err
	}
	return e.operator(ctx, store.AuditRelease, id, act, mutation{dropTomb: true}, func(cur *rec, now int64) (*rec, error) {
		next, err := cur.OperatorRelease(now, ttl)
		return cur.with(next), err
	})
}

// OperatorComplete records a verified outcome on an operator's word (see
// store.Engine.OperatorComplete) and appends act to its audit trail.
func (e *Engine) OperatorComplete(ctx context.Context, id string, res store.Result, act store.Action, ttl time.Duration) (*store.Record, error) {
	res, ttl, err := store.OperatorCompletion(res, ttl)
	if err != nil {
		return nil, err
	}
	result := store.KeptResult(res)
	return e.operator(ctx, store.AuditComplete, id, act, mutation{tomb: store.Millis(store.DefaultTombstone)}, func(cur *rec, now int64) (*rec, error) {
		next, err := cur.OperatorComplete(now, result, ttl)
		return cur.with(next), err
	})
}

// operator runs an operator's change on an existing record: f returns
// the new record or the conflict; the audit entry is added in the same
// transaction.
// ret says what it does to the record's tombstone.
func (e *Engine) operator(ctx context.Context, action, id string, act store.Action, ret mutation, f func(cur *rec, now int64) (*rec, error)) (*store.Record, error) {
	if err := store.CheckOperator(id, act); err != nil {
		return nil, err
	}
	return e.audited(ctx, action, id, act, ret, f)
}

// audited runs f on an existing record and appends act to the audit
// trail of the record it returns, in the same transaction.
func (e *Engine) audited(ctx context.Context, action, id string, act store.Action, ret mutation, f func(cur *rec, now int64) (*rec, error)) (*store.Record, error) {
	var refused error
	out, err := e.update(ctx, "operator "+action, id, func(cur *rec, now int64) mutation {
		refused = nil
		if cur == nil {
			refused = fmt.Errorf("%w: %s", store.ErrNotFound, id)
			return mutation{}
		}
		r, err := f(cur, now)
		if err != nil {
			refused = err
			return mutation{}
		}
		r.AddAudit(now, act.Actor, action, act.Reason)
		ret.next = r
		return ret
	})
	switch {
	case err != nil:
		return nil, err
	case refused != nil && out == nil:
		return nil, refused
	case refused != nil:
		return out.View(), refused
	}
	return out.View(), nil
}

// BeginCheck takes record id's check lease for lease (see
// store.Engine.BeginCheck).
func (e *Engine) BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*store.Record, bool, error) {
	if err := store.ValidateBeginCheck(id, claimToken, checkToken, lease); err != nil {
		return nil, false, err
	}
	return e.checkChange(ctx, "begin check", id, 0, func(cur *rec, now int64) (*rec, bool) {
		next, ok := cur.BeginCheck(now, claimToken, checkToken, lease, due)
		return cur.with(next), ok
	})
}

// EndCheck records a check under its lease and applies its verdict (see
// store.Engine.EndCheck).
func (e *Engine) EndCheck(ctx context.Context, o store.CheckOutcome) (*store.Record, bool, error) {
	o, err := store.CheckEndCheck(o)
	if err != nil {
		return nil, false, err
	}
	return e.checkChange(ctx, "end check", o.ID, store.Millis(o.Tombstone), func(cur *rec, now int64) (*rec, bool) {
		next, ok := cur.EndCheck(now, o)
		return cur.with(next), ok
	})
}

// checkChange runs a check's change of an existing record: f returns the
// new record (nil: none) and whether the call succeeds. It returns the
// record as left. A change that completes the record leaves a tombstone
// of tomb ms (0: none).
func (e *Engine) checkChange(ctx context.Context, op, id string, tomb int64, f func(cur *rec, now int64) (*rec, bool)) (*store.Record, bool, error) {
	ok := false
	out, err := e.update(ctx, op, id, func(cur *rec, now int64) mutation {
		ok = false
		if cur == nil {
			return mutation{}
		}
		var r *rec
		r, ok = f(cur, now)
		m := mutation{next: r}
		if r != nil && r.State == store.StateCompleted {
			m.tomb = tomb
		}
		return m
	})
	if err != nil || out == nil {
		return nil, false, err
	}
	return out.View(), ok, nil
}

// NotDone records a "not done" execution under its claim: released, or
// held as retries exhausted once the budget is used up.
func (e *Engine) NotDone(ctx context.Context, req store.NotDoneRequest) (store.NotDoneOutcome, error) {
	req, err := store.CheckNotDone(req)
	if err != nil {
		return store.NotDoneLost, err
	}
	outcome := store.NotDoneLost
	_, err = e.change(ctx, "not done", req.ID, false, true, func(cur *rec, now int64) *rec {
		var next *store.Stored
		next, outcome = cur.stored().AnswerNotDone(now, req)
		return cur.with(next)
	})
	if err != nil {
		return store.NotDoneLost, err
	}
	return outcome, nil
}

// Redrive claims a record for an operator's re-drive (see
// store.Engine.Redrive).
func (e *Engine) Redrive(ctx context.Context, req store.RedriveRequest) (*store.Record, error) {
	req, err := store.CheckRedrive(req)
	if err != nil {
		return nil, err
	}
	return e.audited(ctx, store.AuditRun, req.ID, req.Act, mutation{}, func(cur *rec, now int64) (*rec, error) {
		next, err := cur.Redrive(now, req)
		return cur.with(next), err
	})
}
