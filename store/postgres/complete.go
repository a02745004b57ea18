package postgres

import (
	"context"
	"strings"

	"github.com/idemgate/idemgate/store"
)

// The completion is one statement too, on the request's hot path: it
// stores the result under the claim's token, or writes the record anew
// when it is gone (store.CompleteRequest), wakes the record's waiters
// (pg_notify, delivered on commit) when somebody may wait for it
// (waited, see notices.go) and commits with synchronous_commit off (see the package
// documentation). A NOTIFY takes a lock that serialises the commits of
// every transaction that sent one, so a completion nobody waits for
// sends none.
//
//	$1 id, $2 token, $3 status, $4 header, $5 body, $6 body omitted,
//	$7 digest, $8 external id, $9 ttl ms, $10 route, $11 operation,
//	$12 fingerprint, $13 fingerprint rule, $14 started at ms (0: now),
//	$15 the notices' channel, $16 tombstone ms past the record (0: none),
//	$17 twin digest ("": none), $18 twin window ms
//
// With tombstones (not ""), the tombstone and the twin entry are written
// by the same statement, once the result is stored; without, the
// statement takes $1 to $15 and touches neither table. The fast form
// (fast) only updates the claim's record; when it stores nothing (the
// record is gone, or the claim fenced out), Complete runs the full form,
// which also writes a gone record anew: Postgres prepares the parts of a
// statement each time it runs it, used or not.
func completeSQL(records, waited, tombstones, twins string, fast bool) string {
	set := make([]string, 0, len(writeCols))
	for _, c := range writeCols[1:] {
		set = append(set, c+" = excluded."+c)
	}
	set = append(set, "claimed_at = 0", "claim_outcome = 0", "epoch = excluded.epoch")
	// The record written anew when it is gone: only in the full form.
	ins := `ins AS (
	INSERT INTO ` + records + ` AS r (id, route, operation, fingerprint, fingerprint_rule, state, token, fence,
		started_at, completed_at, attempts, executions, status, header, body, body_omitted, digest, external_id, expire_at, epoch)
	SELECT $1, $10, $11, $12, $13, 'completed', $2, 0,
		CASE WHEN $14::bigint = 0 THEN c.now ELSE $14 END, c.now, 1, 1, $3, $4, $5, $6, $7, $8, c.now + $9, c.now
	FROM c WHERE NOT EXISTS (SELECT 1 FROM upd)
	ON CONFLICT (id) DO UPDATE SET ` + strings.Join(set, ", ") + `
	WHERE r.expire_at <= excluded.completed_at
	RETURNING r.waiters
),`
	done, wrote := "(SELECT count(*) FROM upd) + (SELECT count(*) FROM ins)", "SELECT waiters FROM upd UNION ALL SELECT waiters FROM ins"
	clock := nowSQL + " AS now"
	if fast {
		// Parameters only the full form uses, typed as there.
		ins, done, wrote = "", "(SELECT count(*) FROM upd)", "SELECT waiters FROM upd"
		clock += ", $10::text AS route, $11::text AS operation, $12::text AS fingerprint, $13::text AS rule, $14::bigint AS started"
	}
	q := `WITH c AS (SELECT ` + clock + `),
upd AS (
	UPDATE ` + records + ` r SET state = 'completed', reason = '', completed_at = c.now,
		status = $3, header = $4, body = $5, body_omitted = $6, digest = $7, external_id = $8,
		request = NULL, expire_at = c.now + $9
	FROM c WHERE r.id = $1 AND r.token = $2 AND r.expire_at > c.now
	RETURNING r.waiters
),
` + ins + `
done AS (SELECT ` + done + ` AS n),
notice AS (SELECT pg_notify($15, $1) FROM (` + wrote + `) w WHERE ` + waited + `)`
	if tombstones != "" {
		q += `,
tomb AS (
	INSERT INTO ` + tombstones + ` (id, completed_at, status, reason, expire_at)
	SELECT $1, c.now, $3, '', c.now + $9 + $16 FROM c, done WHERE done.n > 0 AND $16::bigint > 0
	ON CONFLICT (id) DO UPDATE SET completed_at = excluded.completed_at, status = excluded.status,
		reason = excluded.reason, expire_at = excluded.expire_at
),
twin AS (
	INSERT INTO ` + twins + ` (twin, id, completed_at, expire_at)
	SELECT $17, $1, c.now, c.now + $18 FROM c, done WHERE done.n > 0 AND $17::text <> '' AND $18::bigint > 0
	ON CONFLICT (twin) DO UPDATE SET id = excluded.id, completed_at = excluded.completed_at, expire_at = excluded.expire_at
)`
	}
	return q + `
SELECT done.n, set_config('synchronous_commit', 'off', true), (SELECT count(*) FROM notice) FROM done`
}

// Complete stores a result under its claim (see store.CompleteRequest),
// also writing the record anew when it does not exist: one statement.
func (e *Engine) Complete(ctx context.Context, req store.CompleteRequest) (bool, error) {
	id, token := req.Claim.ID, req.Claim.Token
	res, ttl, err := store.CheckComplete(req)
	if err != nil {
		return false, err
	}
	twin, window := req.TwinEntry()
	var started int64
	if !req.StartedAt.IsZero() {
		started = req.StartedAt.UnixMilli()
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	var (
		n, notified int64
		sync        string
	)
	args := []any{id, token, res.Status, store.EncodeHeader(res.Header), res.Body, res.BodyOmitted, res.Digest, res.ExternalID,
		store.Millis(ttl), req.Claim.Route, req.Claim.Operation, req.Claim.Fingerprint, req.Claim.FingerprintRule,
		started, e.notices.channel}
	q := e.sql.complete
	if req.Tombstone > 0 || (twin != "" && window > 0) {
		q = e.sql.completePast
		args = append(args, store.Millis(req.Tombstone), twin, store.Millis(window))
	}
	// The fast form first: the claim's record, still there, updated;
	// when it stored nothing (the record is gone, or fenced out), the
	// full form, which writes a gone record anew.
	err = e.pool.QueryRow(ctx, e.sql.fast[q], args...).Scan(&n, &sync, &notified)
	if err == nil && n == 0 {
		err = e.pool.QueryRow(ctx, q, args...).Scan(&n, &sync, &notified)
	}
	if err != nil {
		return false, e.opErr("complete", id, e.poolWaitErr(ctx, err))
	}
	return n > 0, nil
}
