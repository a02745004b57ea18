package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
)

// The claim is one statement, one round trip, in the usual cases: the
// fast statement (fast) reads the id's row, and inserts the record in
// flight when there is none (ON CONFLICT DO NOTHING); a live row the
// claim only counts an attempt of (a replay, a conflict with a request in
// flight, a record held as outcome unknown) is returned as read, and the
// engine counts the attempt (counts.go): no row version, no WAL. Any
// other row (expired, to be taken over or held, or found in flight for
// the first time, which marks it for its waiters) goes to the full
// statement: on the existing row (locked by ON CONFLICT) it decides by
// the contract's rules on the database's clock what the claim does to
// it (store.Engine.Claim) and writes that. Its WHERE leaves a claim
// retried by its own claimant untouched. The row's claim_outcome says
// what the statement did, and claimed_at the clock it decided by, so
// RETURNING gives the caller everything. The fast statement exists
// because Postgres prepares every part of a statement each time it runs
// it: the full statement's ON CONFLICT DO UPDATE, a CASE for every
// column, cost a replay several times what reading the row did.
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
	// outcomeRead: the claim only read the record (never stored).
	outcomeRead = -1
	// outcomeFull: the fast claim found a record it leaves to the full
	// statement (never stored).
	outcomeFull = -2
)

// Parameters of the claim statement.
//
//	$1 id, $2 route, $3 operation, $4 fingerprint, $5 fingerprint rule,
//	$6 token, $7 lease ms, $8 hold ms, $9 on expiry release (bool),
//	$10 max executions, $11 check method, $12 check url, $13 check
//	after ms, $14 check match, $15 request, $16 tool call
//	(store.EncodeToolCall, NULL: none), $17 twin digest ("": none), $18
//	after expiry ("": look for no tombstone), $19 on twin
//
// A record that is absent or gone (fresh) is decided first from the
// id's live tombstone and the live twin entry naming another id (the
// CTE past, in the same statement): rejected (nothing inserted), held
// for the same payload (inserted as outcome unknown, counted, never
// executed) or created. The statement returns one row whatever it did:
// the decision and what it found, then the record (NULL when nothing was
// written: a rejection, or a claim retried by its own claimant).
func claimSQL(records, fences, counts, tombstones, twins string, fast bool) string {
	const (
		now     = "excluded.started_at"
		gone    = "r.expire_at <= " + now
		expired = "(r.state = 'in_flight' AND r.lease_until <= " + now + ")"
		same    = "(r.fingerprint = excluded.fingerprint AND r.fingerprint_rule = excluded.fingerprint_rule)"
		// free: released as refused (store.Free): any payload takes it
		// over.
		free = "(r.state = 'released' AND r.reason = '" + store.ReasonRefused + "' AND r.unknowns = 0)"
	)
	// The branches, tried in this order once the record is live.
	hold := expired + " AND NOT $9"                                                              // lease ran out: outcome unknown
	exhausted := expired + " AND $9 AND " + same + " AND $10 > 0 AND r.not_done + 1 >= $10"      // let go, budget used up
	takeOver := "((" + same + " AND (" + expired + " OR r.state = 'released')) OR " + free + ")" // what is left of it takes over
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
		tk("route"), keep("operation"), tk("fingerprint"), tk("fingerprint_rule"),
		"state = " + branch("excluded.state", hold, "'unknown'", exhausted, "'unknown'", takeOver, "'in_flight'", "r.state"),
		tk("token"), tk("fence"), tk("started_at"), tk("completed_at"), tk("lease_until"),
		"attempts = " + branch("1", "r.attempts + 1"),
		"executions = " + branch("excluded.executions", hold, "r.executions", exhausted, "r.executions", takeOver, "r.executions + 1", "r.executions"),
		tk("status"), tk("header"), tk("body"), tk("body_omitted"), tk("digest"), tk("external_id"),
		"reason = " + branch("excluded.reason", hold, "'lease_expired'", exhausted, fmt.Sprintf("'%s'", store.ReasonRetriesExhausted), takeOver, "''", "r.reason"),
		keep("audit"),
		tk("check_method"), tk("check_url"), tk("check_after"), tk("check_match"),
		keep("checks"), tk("check_count"),
		"next_check = " + branch("0",
			hold, "CASE WHEN r.check_url <> '' THEN "+now+" + r.check_after ELSE r.next_check END",
			exhausted, "0", takeOver, "0", "r.next_check"),
		tk("not_found_streak"), tk("check_lease_until"), tk("check_token"), tk("not_found_at"),
		"not_done = " + branch("0", hold, "r.not_done", exhausted, "r.not_done + 1", takeOver+" AND "+expired, "r.not_done + 1", "r.not_done"),
		"unknowns = " + branch("0", hold, "r.unknowns", exhausted, "r.unknowns + 1", takeOver+" AND "+expired, "r.unknowns + 1", "r.unknowns"),
		keep("answers"), tk("request"), tk("tool_call"),
		"expire_at = " + branch("excluded.expire_at", hold, "excluded.expire_at", exhausted, "excluded.expire_at", takeOver, "excluded.expire_at", "r.expire_at"),
		"claimed_at = " + now,
		"claim_outcome = " + branch("excluded.claim_outcome", hold, fmt.Sprint(outcomeCounted), exhausted, fmt.Sprint(outcomeCounted),
			takeOver, fmt.Sprint(outcomeTakeOver), fmt.Sprint(outcomeCounted)),
		keep("epoch"),
		// A duplicate that finds the record in flight marks it: its
		// end sends a notice (complete.go, Engine.update).
		"waiters = " + branch("false", hold, "r.waiters", exhausted, "r.waiters", takeOver, "r.waiters",
			"r.waiters OR (r.state = 'in_flight' AND r.token <> excluded.token)"),
	}
	// readOnly: a live record the claim would only count an attempt of
	// (store.Engine.Claim: a completed record, one held as outcome
	// unknown, one released that this payload does not take over, one in
	// flight whose lease runs and that is already marked for waiters), or
	// the claimant's own claim retried. The claim then only reads it, and
	// the engine counts the attempt (counts.go).
	const readOnly = `(r.state IN ('completed', 'unknown')
		OR (r.state = 'released' AND NOT ((r.fingerprint = $4 AND r.fingerprint_rule = $5)
			OR (r.reason = '` + store.ReasonRefused + `' AND r.unknowns = 0)))
		OR (r.state = 'in_flight' AND r.lease_until > c.now AND (r.token = $6 OR r.waiters)))`
	curCols := make([]string, 0, len(writeCols)+len(readCols))
	for _, col := range writeCols {
		curCols = append(curCols, "r."+col)
	}
	// claim_outcome -1: read only; -2 (fast): the full statement decides.
	curWhere := "r.expire_at > c.now AND " + readOnly
	outcome := fmt.Sprintf("(%d)::smallint", outcomeRead)
	if fast {
		outcome = fmt.Sprintf("(CASE WHEN %s THEN %d ELSE %d END)::smallint", curWhere, outcomeRead, outcomeFull)
		curWhere = "true"
	}
	curCols = append(curCols, "c.now", outcome, "r.epoch", "r.waiters", countsCol(counts, "r.id", "r.epoch"), "''")
	onConflict := `ON CONFLICT (id) DO UPDATE SET ` + strings.Join(set, ",\n\t") + `
	WHERE NOT (r.expire_at > ` + now + ` AND r.state = 'in_flight' AND r.token = excluded.token)`
	insCounts := countsCol(counts, "r.id", "r.epoch")
	if fast {
		onConflict, insCounts = "ON CONFLICT (id) DO NOTHING", "ARRAY[0, 0]::bigint[]"
	}
	held := "p.act = 'hold'"
	past := `past AS (SELECT c.now, 'create' AS act, NULL::bigint AS t_ca, NULL::integer AS t_sc, NULL::text AS t_rsn,
	NULL::text AS w_id, NULL::bigint AS w_ca FROM c)`
	if tombstones != "" {
		// A live record: the fast statement's cur holds the id's row,
		// whatever its state. The lateral subqueries (kept apart from the
		// join by OFFSET 0) read the tables only when the record is not
		// live (a gating filter), so a replay reads neither.
		live := "SELECT 1 FROM " + records + " WHERE id = $1 AND expire_at > c.now"
		if fast {
			live = "SELECT 1 FROM cur WHERE cur.expire_at > c.now"
		}
		past = `past AS (
	SELECT c.now, CASE WHEN NOT f.fresh THEN 'create'
			WHEN (t.id IS NOT NULL AND $18 = 'reject') OR (w.id IS NOT NULL AND $19 = 'reject') THEN 'reject'
			WHEN w.id IS NOT NULL AND $19 = 'hold' THEN 'hold'
			ELSE 'create' END AS act,
		t.completed_at AS t_ca, t.status AS t_sc, t.reason AS t_rsn, w.id AS w_id, w.completed_at AS w_ca
	FROM c
	CROSS JOIN LATERAL (SELECT NOT EXISTS (` + live + `) AS fresh) f
	LEFT JOIN LATERAL (SELECT * FROM ` + tombstones + ` t
		WHERE f.fresh AND $18 <> '' AND t.id = $1 AND t.expire_at > c.now OFFSET 0) t ON true
	LEFT JOIN LATERAL (SELECT * FROM ` + twins + ` w
		WHERE f.fresh AND $17 <> '' AND w.twin = $17 AND w.expire_at > c.now AND w.id <> $1 OFFSET 0) w ON true
)`
	}
	clock := nowSQL + " AS now"
	if fast {
		// Parameters only the full statement uses, typed as there.
		clock += ", $9::boolean AS on_expiry_release, $10::bigint AS max_executions"
	}
	return `WITH c AS (SELECT ` + clock + `),
cur AS (SELECT ` + strings.Join(curCols, ", ") + ` FROM ` + records + ` r, c
	WHERE r.id = $1 AND ` + curWhere + `),
` + past + `,
ins AS (
	INSERT INTO ` + records + ` AS r (id, route, operation, fingerprint, fingerprint_rule, state, token, fence,
	started_at, lease_until, executions, reason, check_method, check_url, check_after, check_match, request, expire_at,
	claimed_at, claim_outcome, epoch, tool_call)
	SELECT $1, $2, $3, $4, $5, CASE WHEN ` + held + ` THEN 'unknown' ELSE 'in_flight' END, $6, nextval('` + fences + `'),
		c.now, CASE WHEN ` + held + ` THEN 0 ELSE c.now + $7 END, CASE WHEN ` + held + ` THEN 0 ELSE 1 END,
		CASE WHEN ` + held + ` THEN '` + store.ReasonSamePayload + `' ELSE '' END,
		CASE WHEN ` + held + ` THEN '' ELSE $11 END, CASE WHEN ` + held + ` THEN '' ELSE $12 END,
		CASE WHEN ` + held + ` THEN 0 ELSE $13 END, CASE WHEN ` + held + ` THEN '' ELSE $14 END,
		$15, c.now + $8, c.now, CASE WHEN ` + held + ` THEN ` + fmt.Sprint(outcomeCounted) + ` ELSE ` + fmt.Sprint(outcomeCreated) + ` END,
		c.now, $16::bytea
	FROM c, past p WHERE p.act <> 'reject' AND NOT EXISTS (SELECT 1 FROM cur)
	` + onConflict + `
	RETURNING ` + strings.Join(append(slices.Clone(writeCols), readCols...), ", ") + `, ` + insCounts + `,
		set_config('synchronous_commit', CASE WHEN r.claim_outcome = ` + fmt.Sprint(outcomeCounted) + ` THEN 'off'
			ELSE current_setting('synchronous_commit') END, true)
)
SELECT p.act, x.id IS NOT NULL, p.now, p.t_ca, p.t_sc, p.t_rsn, p.w_id, p.w_ca, x.*
FROM past p LEFT JOIN (SELECT * FROM ins UNION ALL SELECT * FROM cur) x ON true`
}

// claimRow scans a claim's row: what it decided and found (past), then
// the record.
type claimRow struct {
	rows pgx.Rows
	past []any
}

func (c claimRow) Scan(dest ...any) error { return c.rows.Scan(append(c.past, dest...)...) }

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
	for try := range maxRetries {
		var (
			act          string
			wrote        bool
			now          int64
			tca, tsc     *int64
			trsn, twinID *string
			wca          *int64
		)
		past := []any{&act, &wrote, &now, &tca, &tsc, &trsn, &twinID, &wca}
		args := []any{req.ID, req.Route, req.Operation, req.Fingerprint, req.FingerprintRule,
			req.Token, store.Millis(a.Lease), store.Millis(a.HoldTTL), a.OnExpired == store.ExpiredRelease, req.MaxExecutions,
			check.Method, check.URL, store.Millis(check.After), store.EncodeCheckMatch(check.Match), nilIfEmpty(req.Request),
			store.EncodeToolCall(req.Call)}
		q := e.sql.claim
		if onTomb := a.OnTombstone(); req.Twin != "" || onTomb != "" {
			// Only a route that keeps tombstones or twin entries looks for
			// them.
			q = e.sql.claimPast
			args = append(args, req.Twin, string(onTomb), string(a.OnTwin))
		}
		if try == 0 {
			q = e.sql.fast[q]
		}
		rows, err := e.pool.Query(ctx, q, args...)
		if err != nil {
			return store.ClaimResult{}, e.opErr("claim", req.ID, e.poolWaitErr(ctx, err))
		}
		var r *rec
		if rows.Next() {
			skip := make([]any, len(rows.FieldDescriptions())-len(past)) // nil: not read
			if err = rows.Scan(append(past, skip...)...); err == nil && wrote {
				r, err = scanRec(claimRow{rows, past}, &syncCommit)
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return store.ClaimResult{}, e.opErr("claim", req.ID, e.poolWaitErr(ctx, err))
		}
		var res store.ClaimResult
		if tca != nil {
			res.Tombstone = &store.Tombstone{ID: req.ID, CompletedAt: time.UnixMilli(*tca), Status: int(*tsc), Reason: *trsn}
		}
		if twinID != nil {
			res.Twin = &store.Twin{ID: *twinID, CompletedAt: time.UnixMilli(*wca)}
		}
		if act == "reject" {
			res.Now = time.UnixMilli(now)
			return res, nil
		}
		if r == nil || r.claimOutcome == outcomeFull {
			// The fast statement met a row it leaves to the full one, or
			// a claim of the same id inserted meanwhile; or the full one
			// met a claim retried by its claimant that changed meanwhile:
			// claim again, with the full statement.
			continue
		}
		switch {
		case r.claimOutcome != outcomeRead:
			e.counts.view(r)
		case r.State == store.StateInFlight && r.Token == req.Token:
			// A claim retried by its claimant: already the caller's,
			// unchanged.
			e.counts.view(r)
			r.claimOutcome = outcomeCreated
		default:
			// An attempt the claim only read: counted here.
			e.counts.count(r)
			r.claimOutcome = outcomeCounted
		}
		res.Record, res.Now = r.View(), time.UnixMilli(r.claimedAt)
		if r.claimOutcome != outcomeCounted {
			res.Claimed, res.TakeOver = true, r.claimOutcome == outcomeTakeOver
			res.Claim = store.NewClaim(e, req, res.Record.StartedAt, req.TTL)
		}
		return res, nil
	}
	return store.ClaimResult{}, e.opErr("claim", req.ID, fmt.Errorf("the record kept changing under the claim"))
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
