package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
)

// The claim is one statement, one round trip: it inserts the record in
// flight, or, on the existing row (locked by ON CONFLICT), decides by
// the contract's rules on the database's clock what the claim does to it
// (store.Engine.Claim) and writes that. Its WHERE leaves a claim retried
// by its own claimant untouched. The row's claim_outcome says what this
// statement did, and claimed_at the clock it decided by, so RETURNING
// gives the caller everything.
//
// A claim that executes (a new record, a takeover) commits as the
// server's synchronous_commit says, before the request is forwarded. A
// claim that only counted (a replay, a conflict, a hold of a lease run
// out) sets synchronous_commit off for its own transaction, from
// RETURNING: a crash that loses it loses an attempt count, or a hold the
// next claim decides again, and a replay does not wait for the WAL to
// reach the disk.

// Claim outcomes, as kept in claim_outcome.
const (
	outcomeCounted  = 0 // not claimed: attempts+1 (and maybe held)
	outcomeCreated  = 1
	outcomeTakeOver = 2
)

// Parameters of the claim statement.
//
//	$1 id, $2 route, $3 operation, $4 fingerprint, $5 fingerprint rule,
//	$6 token, $7 lease ms, $8 hold ms, $9 on expiry release (bool),
//	$10 max executions, $11 check method, $12 check url, $13 check
//	after ms, $14 check match, $15 request
func claimSQL(records, fences string) string {
	const (
		now     = "excluded.started_at"
		gone    = "r.expire_at <= " + now
		expired = "(r.state = 'in_flight' AND r.lease_until <= " + now + ")"
		same    = "(r.fingerprint = excluded.fingerprint AND r.fingerprint_rule = excluded.fingerprint_rule)"
	)
	// The branches, tried in this order once the record is live.
	hold := expired + " AND NOT $9"                                                         // lease ran out: outcome unknown
	exhausted := expired + " AND $9 AND " + same + " AND $10 > 0 AND r.not_done + 1 >= $10" // let go, budget used up
	takeOver := same + " AND (" + expired + " OR r.state = 'released')"                     // what is left of it takes over
	branch := func(whenGone string, cases ...string) string {
		// cases: condition, value pairs, then the default value.
		var b strings.Builder
		b.WriteString("CASE WHEN " + gone + " THEN " + whenGone)
		for i := 0; i+1 < len(cases); i += 2 {
			b.WriteString(" WHEN " + cases[i] + " THEN " + cases[i+1])
		}
		b.WriteString(" ELSE " + cases[len(cases)-1] + " END")
		return b.String()
	}
	// tk is a column a takeover (and a new record) sets to the inserted
	// value, and anything else keeps.
	tk := func(col string) string {
		return col + " = " + branch("excluded."+col, hold, "r."+col, exhausted, "r."+col, takeOver, "excluded."+col, "r."+col)
	}
	keep := func(col string) string { return col + " = " + branch("excluded."+col, "r."+col) }
	set := []string{
		tk("route"), keep("operation"), keep("fingerprint"), keep("fingerprint_rule"),
		"state = " + branch("'in_flight'", hold, "'unknown'", exhausted, "'unknown'", takeOver, "'in_flight'", "r.state"),
		tk("token"), tk("fence"), tk("started_at"), tk("completed_at"), tk("lease_until"),
		"attempts = " + branch("1", "r.attempts + 1"),
		"executions = " + branch("1", hold, "r.executions", exhausted, "r.executions", takeOver, "r.executions + 1", "r.executions"),
		tk("status"), tk("header"), tk("body"), tk("body_omitted"), tk("digest"), tk("external_id"),
		"reason = " + branch("''", hold, "'lease_expired'", exhausted, fmt.Sprintf("'%s'", store.ReasonRetriesExhausted), takeOver, "''", "r.reason"),
		keep("audit"),
		tk("check_method"), tk("check_url"), tk("check_after"), tk("check_match"),
		keep("checks"), tk("check_count"),
		"next_check = " + branch("0",
			hold, "CASE WHEN r.check_url <> '' THEN "+now+" + r.check_after ELSE r.next_check END",
			exhausted, "0", takeOver, "0", "r.next_check"),
		tk("not_found_streak"), tk("check_lease_until"), tk("check_token"), tk("not_found_at"),
		"not_done = " + branch("0", hold, "r.not_done", exhausted, "r.not_done + 1", takeOver+" AND "+expired, "r.not_done + 1", "r.not_done"),
		"unknowns = " + branch("0", hold, "r.unknowns", exhausted, "r.unknowns + 1", takeOver+" AND "+expired, "r.unknowns + 1", "r.unknowns"),
		keep("answers"), tk("request"),
		"expire_at = " + branch("excluded.expire_at", hold, "excluded.expire_at", exhausted, "excluded.expire_at", takeOver, "excluded.expire_at", "r.expire_at"),
		"claimed_at = " + now,
		"claim_outcome = " + branch(fmt.Sprint(outcomeCreated), hold, fmt.Sprint(outcomeCounted), exhausted, fmt.Sprint(outcomeCounted),
			takeOver, fmt.Sprint(outcomeTakeOver), fmt.Sprint(outcomeCounted)),
	}
	return "INSERT INTO " + records + ` AS r (id, route, operation, fingerprint, fingerprint_rule, state, token, fence,
	started_at, lease_until, check_method, check_url, check_after, check_match, request, expire_at, claimed_at, claim_outcome)
SELECT $1, $2, $3, $4, $5, 'in_flight', $6, nextval('` + fences + `'),
	c.now, c.now + $7, $11, $12, $13, $14, $15, c.now + $8, c.now, ` + fmt.Sprint(outcomeCreated) + `
FROM (SELECT ` + nowSQL + ` AS now) c
ON CONFLICT (id) DO UPDATE SET ` + strings.Join(set, ",\n\t") + `
WHERE NOT (r.expire_at > ` + now + ` AND r.state = 'in_flight' AND r.token = excluded.token)
RETURNING ` + recCols() + `,
	set_config('synchronous_commit', CASE WHEN r.claim_outcome = ` + fmt.Sprint(outcomeCounted) + ` THEN 'off'
		ELSE current_setting('synchronous_commit') END, true)`
}

// Claim takes the right to execute an operation, or returns its record
// (see store.Engine.Claim for the rules, which are the same).
func (e *Engine) Claim(ctx context.Context, req store.ClaimRequest) (store.ClaimResult, error) {
	a, err := store.ValidateClaim(req)
	if err != nil {
		return store.ClaimResult{}, err
	}
	check := req.Check.Normalized()
	ctx, cancel := e.call(ctx)
	defer cancel()
	var syncCommit string // what the claim's transaction committed with
	for range maxRetries {
		r, err := scanRec(e.pool.QueryRow(ctx, e.sql.claim,
			req.ID, req.Route, req.Operation, req.Fingerprint, req.FingerprintRule,
			req.Token, store.Millis(a.Lease), store.Millis(a.HoldTTL), a.OnExpired == store.ExpiredRelease, req.MaxExecutions,
			check.Method, check.URL, store.Millis(check.After), store.EncodeCheckMatch(check.Match), nilIfEmpty(req.Request)), &syncCommit)
		if err == nil {
			res := store.ClaimResult{Record: r.View(), Now: time.UnixMilli(r.claimedAt)}
			if r.claimOutcome != outcomeCounted {
				res.Claimed, res.TakeOver = true, r.claimOutcome == outcomeTakeOver
				res.Claim = store.NewClaim(e, req, res.Record.StartedAt, req.TTL)
			}
			return res, nil
		}
		if !isNoRows(err) {
			return store.ClaimResult{}, e.opErr("claim", req.ID, err)
		}
		// A claim retried by its claimant: already the caller's, unchanged.
		cur, now, err := e.get(ctx, req.ID)
		if err != nil {
			return store.ClaimResult{}, e.opErr("claim", req.ID, err)
		}
		if cur != nil && cur.State == store.StateInFlight && cur.Token == req.Token {
			res := store.ClaimResult{Claimed: true, Record: cur.View(), Now: time.UnixMilli(now)}
			res.Claim = store.NewClaim(e, req, res.Record.StartedAt, req.TTL)
			return res, nil
		}
		// It changed between the two statements: claim again.
	}
	return store.ClaimResult{}, e.opErr("claim", req.ID, fmt.Errorf("the record kept changing under the claim"))
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
