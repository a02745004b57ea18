package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/idemgate/idemgate/store"
)

// Verification checks (see store.Engine.BeginCheck and EndCheck for the
// rules, which are the same).

// normalCheck is a claim's check as a record keeps it.
func normalCheck(c store.Check) store.Check {
	c = c.Normalized()
	c.Match = slices.Clone(c.Match) // not the caller's
	return c
}

// scheduleFirstCheck makes a record that was just held due for its first
// scheduled check its After from now.
func (r *rec) scheduleFirstCheck(now int64) {
	if !r.Check.IsZero() {
		r.NextCheck = time.UnixMilli(now + store.Millis(r.Check.After))
	}
}

// newClaimChecks starts a new claim's checks: its own check, no count,
// streak, schedule or lease; the log of earlier checks stays.
func (r *rec) newClaimChecks(c store.Check) {
	r.Check = c
	r.CheckCount, r.NotFoundStreak, r.notFoundAt = 0, 0, 0
	r.NextCheck, r.CheckLeaseUntil, r.checkToken = time.Time{}, time.Time{}, ""
}

// BeginCheck takes record id's check lease for lease.
func (e *Engine) BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*store.Record, bool, error) {
	if err := store.ValidateBeginCheck(id, claimToken, checkToken, lease); err != nil {
		return nil, false, err
	}
	return e.checkChange(ctx, "begin check", id, func(cur *rec, now int64) (*rec, bool) {
		if cur.State != store.StateUnknown || cur.Token != claimToken {
			return nil, false
		}
		leased := msOf(cur.CheckLeaseUntil) > now
		switch {
		case leased && cur.checkToken == checkToken:
			return nil, true // a retried BeginCheck
		case leased, due && (cur.NextCheck.IsZero() || msOf(cur.NextCheck) > now):
			return nil, false
		}
		r := cur.clone()
		r.checkToken = checkToken
		r.CheckLeaseUntil = time.UnixMilli(now + store.Millis(lease))
		return r, true
	})
}

// EndCheck records a check under its lease and applies its verdict.
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
		if entry.Verdict == store.VerdictNotApplied &&
			(r.notFoundAt == 0 || now-r.notFoundAt >= store.Millis(o.Every)) {
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
// record as left, once on disk.
func (e *Engine) checkChange(ctx context.Context, op, id string, f func(cur *rec, now int64) (*rec, bool)) (*store.Record, bool, error) {
	ok := false
	out, _, err := e.update(ctx, op, id, func(cur *rec, now int64) mutation {
		if cur == nil {
			return mutation{}
		}
		var r *rec
		r, ok = f(cur, now)
		return mutation{next: r, dur: synced}
	})
	if err != nil || out == nil {
		return nil, false, err
	}
	return out.view(), ok, nil
}
