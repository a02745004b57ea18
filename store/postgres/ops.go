package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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
	if isNoRows(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if r.expireAt <= now {
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
	return r.view(), nil
}

// Renew extends a live claim's lease to now+lease: one fenced UPDATE.
func (e *Engine) Renew(ctx context.Context, id, token string, lease time.Duration) (bool, error) {
	if !store.ValidID(id) {
		return false, store.ErrInvalidID
	}
	lease = store.OrDefault(lease, store.DefaultLease)
	if lease < 0 {
		return false, errors.New("store: negative lease")
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
	ttl = store.OrDefault(ttl, store.DefaultTTL)
	if ttl < 0 {
		return false, errors.New("store: negative TTL")
	}
	if !store.ValidID(id) {
		return false, store.ErrInvalidID
	}
	return e.change(ctx, "release", id, false, true, func(cur *rec, now int64) *rec {
		if cur == nil || cur.Token != token {
			return nil
		}
		r := cur.clone()
		r.clearResult()
		r.State, r.Reason = store.StateReleased, store.ReasonNotDone
		r.expireAt = now + store.Millis(ttl)
		return r
	})
}

// MarkUnknown holds the record as outcome unknown; a completed record is
// never demoted.
func (e *Engine) MarkUnknown(ctx context.Context, id, token, reason string, holdTTL time.Duration) (bool, error) {
	holdTTL = store.OrDefault(holdTTL, store.DefaultHoldTTL)
	if holdTTL < 0 {
		return false, errors.New("store: negative hold TTL")
	}
	if reason == "" {
		reason = "unknown"
	}
	if !store.ValidID(id) {
		return false, store.ErrInvalidID
	}
	return e.change(ctx, "mark unknown", id, false, true, func(cur *rec, now int64) *rec {
		if cur == nil || cur.Token != token || cur.State == store.StateCompleted {
			return nil
		}
		r := cur.clone()
		r.State, r.Reason = store.StateUnknown, reason
		r.expireAt = now + store.Millis(holdTTL)
		r.scheduleFirstCheck(now)
		return r
	})
}

// OperatorRelease releases a record on an operator's word (see
// store.Engine.OperatorRelease) and appends act to its audit trail.
func (e *Engine) OperatorRelease(ctx context.Context, id string, act store.Action, ttl time.Duration) (*store.Record, error) {
	ttl = store.OrDefault(ttl, store.DefaultTTL)
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL", store.ErrInvalidArgument)
	}
	return e.operator(ctx, store.AuditRelease, id, act, func(cur *rec, now int64) (*rec, error) {
		if cur.State == store.StateInFlight && ms(cur.LeaseUntil) > now || cur.checking(now) {
			return nil, store.ConflictOf(&cur.Record)
		}
		r := cur.clone()
		r.clearResult()
		r.State, r.Token, r.Reason = store.StateReleased, store.NewToken(), store.ReasonOperator
		r.NotDone, r.Unknowns = 0, 0 // a fresh retry budget
		r.expireAt = now + store.Millis(ttl)
		return r, nil
	})
}

// OperatorComplete records a verified outcome on an operator's word (see
// store.Engine.OperatorComplete) and appends act to its audit trail.
func (e *Engine) OperatorComplete(ctx context.Context, id string, res store.Result, act store.Action, ttl time.Duration) (*store.Record, error) {
	res, ttl, err := store.OperatorCompletion(res, ttl)
	if err != nil {
		return nil, err
	}
	result := newResult(res)
	return e.operator(ctx, store.AuditComplete, id, act, func(cur *rec, now int64) (*rec, error) {
		if cur.State == store.StateCompleted || cur.State == store.StateInFlight && ms(cur.LeaseUntil) > now || cur.checking(now) {
			return nil, store.ConflictOf(&cur.Record)
		}
		r := cur.clone()
		r.State, r.Token, r.Reason = store.StateCompleted, store.NewToken(), store.ReasonOperator
		r.CompletedAt = time.UnixMilli(now)
		r.setResult(result)
		r.Request = nil
		r.expireAt = now + store.Millis(ttl)
		return r, nil
	})
}

// checking reports whether a verification check holds the record.
func (r *rec) checking(now int64) bool { return r.CheckRunning(time.UnixMilli(now)) }

// operator runs an operator's change on an existing record: f returns
// the new record or the conflict; the audit entry is added in the same
// transaction.
func (e *Engine) operator(ctx context.Context, action, id string, act store.Action, f func(cur *rec, now int64) (*rec, error)) (*store.Record, error) {
	if !store.ValidID(id) {
		return nil, store.ErrInvalidID
	}
	if err := act.Validate(); err != nil {
		return nil, err
	}
	return e.audited(ctx, action, id, act, f)
}

// audited runs f on an existing record and appends act to the audit
// trail of the record it returns, in the same transaction.
func (e *Engine) audited(ctx context.Context, action, id string, act store.Action, f func(cur *rec, now int64) (*rec, error)) (*store.Record, error) {
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
		r.Audit = append(r.Audit, store.AuditEntry{At: time.UnixMilli(now), Actor: act.Actor, Action: action, Reason: act.Reason})
		if n := len(r.Audit) - store.MaxAuditEntries; n > 0 {
			r.Audit = r.Audit[n:] // the newest are kept
		}
		return mutation{next: r}
	})
	switch {
	case err != nil:
		return nil, err
	case refused != nil && out == nil:
		return nil, refused
	case refused != nil:
		return out.view(), refused
	}
	return out.view(), nil
}

// BeginCheck takes record id's check lease for lease (see
// store.Engine.BeginCheck).
func (e *Engine) BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*store.Record, bool, error) {
	if err := store.ValidateBeginCheck(id, claimToken, checkToken, lease); err != nil {
		return nil, false, err
	}
	return e.checkChange(ctx, "begin check", id, func(cur *rec, now int64) (*rec, bool) {
		if cur.State != store.StateUnknown || cur.Token != claimToken {
			return nil, false
		}
		leased := ms(cur.CheckLeaseUntil) > now
		switch {
		case leased && cur.checkToken == checkToken:
			return nil, true // a retried BeginCheck
		case leased, due && (cur.NextCheck.IsZero() || ms(cur.NextCheck) > now):
			return nil, false
		}
		r := cur.clone()
		r.checkToken = checkToken
		r.CheckLeaseUntil = time.UnixMilli(now + store.Millis(lease))
		return r, true
	})
}

// EndCheck records a check under its lease and applies its verdict (see
// store.Engine.EndCheck).
func (e *Engine) EndCheck(ctx context.Context, o store.CheckOutcome) (*store.Record, bool, error) {
	if err := o.Validate(); err != nil {
		return nil, false, err
	}
	if o.Operator != nil {
		if err := o.Operator.Validate(); err != nil {
			return nil, false, err
		}
	}
	ttl := store.Millis(store.OrDefault(o.TTL, store.DefaultTTL))
	res := o.Result
	if o.Entry.Verdict == store.VerdictApplied {
		if res.Digest == "" {
			sum := sha256.Sum256(res.Body)
			res.Digest = hex.EncodeToString(sum[:])
		}
		res.BodyOmitted = false
		res = newResult(res)
	}
	return e.checkChange(ctx, "end check", o.ID, func(cur *rec, now int64) (*rec, bool) {
		if cur.State != store.StateUnknown || cur.Token != o.ClaimToken || cur.checkToken != o.CheckToken {
			return nil, false
		}
		r := cur.clone()
		entry := o.Entry
		entry.At = time.UnixMilli(now)
		r.Checks = append(r.Checks, entry)
		if n := len(r.Checks); n > store.MaxCheckEntries {
			r.Checks = slices.Clone(r.Checks[n-store.MaxCheckEntries:])
		}
		r.CheckCount++
		r.checkToken, r.CheckLeaseUntil = "", time.Time{}
		if o.Operator != nil {
			r.Audit = append(r.Audit, store.AuditEntry{
				At: time.UnixMilli(now), Actor: o.Operator.Actor, Action: store.AuditVerify, Reason: o.Operator.Reason,
			})
		}
		if entry.Verdict == store.VerdictNotApplied && (r.notFoundAt == 0 || now-r.notFoundAt >= store.Millis(o.Every)) {
			r.NotFoundStreak++
			r.notFoundAt = now
		}
		switch {
		case entry.Verdict == store.VerdictApplied:
			r.State, r.Token, r.Reason = store.StateCompleted, o.CheckToken, store.ReasonVerified
			r.Request = nil // a completed record keeps no request
			r.CompletedAt = time.UnixMilli(now)
			r.setResult(res)
			r.NextCheck = time.Time{}
			r.expireAt = now + ttl
		case entry.Verdict == store.VerdictNotApplied && r.NotFoundStreak >= int64(o.NotFoundChecks):
			r.clearResult()
			r.State, r.Token, r.Reason = store.StateReleased, o.CheckToken, store.ReasonVerifiedNotApplied
			r.Unknowns = 0 // found not applied: no earlier execution took effect
			r.NextCheck = time.Time{}
			r.expireAt = now + ttl
		case o.Next > 0:
			r.NextCheck = time.UnixMilli(now + store.Millis(o.Next))
		default:
			r.NextCheck = time.Time{}
		}
		return r, true
	})
}

// checkChange runs a check's change of an existing record: f returns the
// new record (nil: none) and whether the call succeeds. It returns the
// record as left.
func (e *Engine) checkChange(ctx context.Context, op, id string, f func(cur *rec, now int64) (*rec, bool)) (*store.Record, bool, error) {
	ok := false
	out, err := e.update(ctx, op, id, func(cur *rec, now int64) mutation {
		ok = false
		if cur == nil {
			return mutation{}
		}
		var r *rec
		r, ok = f(cur, now)
		return mutation{next: r}
	})
	if err != nil || out == nil {
		return nil, false, err
	}
	return out.view(), ok, nil
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
		outcome = store.NotDoneLost
		if cur == nil || cur.Token != req.Token {
			return nil
		}
		r := cur.clone()
		r.clearResult()
		r.NotDone++
		if req.Unknown {
			r.Unknowns++
		}
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
		r.State, r.Reason = store.StateReleased, req.ReleasedReason()
		r.expireAt = now + store.Millis(req.TTL)
		outcome = store.NotDoneReleased
		return r
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
