package postgres

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store"
)

// rec is a record as kept: the rules' store.Stored plus the fence
// number of the execution's claim and what the last claim did.
type rec struct {
	store.Stored
	fence int64 // the sequence number of the execution's claim

	claimedAt    int64 // the clock at the last claim (claim.go)
	claimOutcome int16

	// epoch tells this record from earlier ones of its id (the clock
	// when it was written anew), the key of its counts (counts.go).
	epoch int64
	// waiters: a duplicate found it in flight; its end sends a notice.
	waiters bool
	// counted are the attempts counted in the table counts by other
	// engines and by this one; extra is what Attempts has beyond the
	// row's column (counts.go), left out when the record is written.
	counted [2]int64
	extra   int64
}

// stored is r's rule state, nil for no record.
func (r *rec) stored() *store.Stored {
	if r == nil {
		return nil
	}
	return &r.Stored
}

// with is r changed to next by a rule (nil: no change), keeping its
// fence and claim.
func (r *rec) with(next *store.Stored) *rec {
	if next == nil {
		return nil
	}
	c := *r
	c.Stored = *next
	return &c
}

// writeCols are the columns a change writes, id first.
var writeCols = []string{
	"id", "route", "operation", "fingerprint", "fingerprint_rule", "state", "token", "fence",
	"started_at", "completed_at", "lease_until", "attempts", "executions",
	"status", "header", "body", "body_omitted", "digest", "external_id", "reason", "audit",
	"check_method", "check_url", "check_after", "check_match", "checks", "check_count", "next_check",
	"not_found_streak", "check_lease_until", "check_token", "not_found_at",
	"not_done", "unknowns", "answers", "request", "expire_at",
	"tool_call",
}

// readCols are the columns a read returns beyond writeCols: the
// claim's, the epoch and the waiters' mark.
var readCols = []string{"claimed_at", "claim_outcome", "epoch", "waiters"}

// recCols are the columns a read returns, then the record's counts
// (countsCol).
func recCols(counts string) string {
	return strings.Join(append(slices.Clone(writeCols), readCols...), ", ") + ", " + countsCol(counts, "id", "epoch")
}

// ms is t in milliseconds, 0 for the zero time.
func ms(t time.Time) int64 { return store.MillisOf(t) }

// at is the time of ms milliseconds, the zero time for 0.
func at(ms int64) time.Time { return store.TimeOfMillis(ms) }

// Stored forms of the states, and back.
func stateOf(s string) store.State {
	if s == "unknown" {
		return store.StateUnknown
	}
	return store.State(s)
}

// JSON forms of the lists a record keeps (times in ms).
type (
	auditJSON struct {
		At     int64  `json:"at"`
		Actor  string `json:"actor"`
		Action string `json:"action"`
		Reason string `json:"reason"`
	}
	checkJSON struct {
		At      int64  `json:"at"`
		Status  int    `json:"status"`
		Verdict string `json:"verdict"`
	}
	answerJSON struct {
		At     int64 `json:"at"`
		Status int   `json:"status"`
	}
)

func encodeList[T, J any](list []T, f func(T) J) string {
	if len(list) == 0 {
		return ""
	}
	out := make([]J, len(list))
	for i, v := range list {
		out[i] = f(v)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func decodeList[T, J any](s string, f func(J) T) ([]T, error) {
	if s == "" {
		return nil, nil
	}
	var in []J
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, err
	}
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out, nil
}

// args are the values of writeCols.
func (r *rec) args() []any {
	audit := encodeList(r.Audit, func(a store.AuditEntry) auditJSON {
		return auditJSON{ms(a.At), a.Actor, a.Action, a.Reason}
	})
	checks := encodeList(r.Checks, func(c store.CheckEntry) checkJSON { return checkJSON{ms(c.At), c.Status, c.Verdict} })
	answers := encodeList(r.Answers, func(a store.Answer) answerJSON { return answerJSON{ms(a.At), a.Status} })
	return []any{
		r.ID, r.Route, r.Operation, r.Fingerprint, r.FingerprintRule, store.StoredState(r.State), r.Token, r.fence,
		ms(r.StartedAt), ms(r.CompletedAt), ms(r.LeaseUntil), r.Attempts - r.extra, r.Executions,
		r.Status, store.EncodeHeader(r.Header), r.Body, r.BodyOmitted, r.Digest, r.ExternalID, r.Reason, audit,
		r.Check.Method, r.Check.URL, store.Millis(r.Check.After), store.EncodeCheckMatch(r.Check.Match), checks, r.CheckCount, ms(r.NextCheck),
		r.NotFoundStreak, ms(r.CheckLeaseUntil), r.CheckToken, r.NotFoundAt,
		r.NotDone, r.Unknowns, answers, r.Request, r.ExpireAt,
		store.EncodeToolCall(r.Call),
	}
}

// scanRec reads one row of recCols (and any extra destinations after
// them).
func scanRec(row pgx.Row, extra ...any) (*rec, error) {
	var (
		r                                                  rec
		state, header, audit, checks, answers, match       string
		started, completed, lease, after, next, checkLease int64
		body, request, call                                []byte
		counted                                            []int64
	)
	dest := []any{
		&r.ID, &r.Route, &r.Operation, &r.Fingerprint, &r.FingerprintRule, &state, &r.Token, &r.fence,
		&started, &completed, &lease, &r.Attempts, &r.Executions,
		&r.Status, &header, &body, &r.BodyOmitted, &r.Digest, &r.ExternalID, &r.Reason, &audit,
		&r.Check.Method, &r.Check.URL, &after, &match, &checks, &r.CheckCount, &next,
		&r.NotFoundStreak, &checkLease, &r.CheckToken, &r.NotFoundAt,
		&r.NotDone, &r.Unknowns, &answers, &request, &r.ExpireAt,
		&call,
		&r.claimedAt, &r.claimOutcome, &r.epoch, &r.waiters, &counted,
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	if len(counted) == 2 {
		r.counted = [2]int64{counted[0], counted[1]}
	}
	r.State = stateOf(state)
	r.StartedAt, r.CompletedAt, r.LeaseUntil = at(started), at(completed), at(lease)
	r.NextCheck, r.CheckLeaseUntil = at(next), at(checkLease)
	r.Header = store.DecodeHeader(header)
	if len(body) > 0 {
		r.Body = body
	}
	if len(request) > 0 {
		r.Request = request
	}
	r.Call = store.DecodeToolCall(call)
	if r.Check.URL != "" {
		r.Check.After = time.Duration(after) * time.Millisecond
		r.Check.Match = store.DecodeCheckMatch(match)
	}
	var err error
	if r.Audit, err = decodeList(audit, func(a auditJSON) store.AuditEntry {
		return store.AuditEntry{At: at(a.At), Actor: a.Actor, Action: a.Action, Reason: a.Reason}
	}); err != nil {
		return nil, err
	}
	if r.Checks, err = decodeList(checks, func(c checkJSON) store.CheckEntry {
		return store.CheckEntry{At: at(c.At), Status: c.Status, Verdict: c.Verdict}
	}); err != nil {
		return nil, err
	}
	if r.Answers, err = decodeList(answers, func(a answerJSON) store.Answer { return store.Answer{At: at(a.At), Status: a.Status} }); err != nil {
		return nil, err
	}
	return &r, nil
}
