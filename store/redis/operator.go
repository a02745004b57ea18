package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
	goredis "github.com/redis/go-redis/v9"
)

// auditEntry is the stored form of an AuditEntry: one JSON object per line
// of the record's audit field; "at" (ms, the Redis clock) is written by the
// script, in front of the fields encoded here.
type auditEntry struct {
	At     int64  `json:"at"`
	Actor  string `json:"actor"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

// encodeAction checks act and returns the audit line without its leading
// `{"at":N,`, as the operator scripts expect it.
func encodeAction(action string, act store.Action) (string, error) {
	if err := act.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(auditEntry{Actor: act.Actor, Action: action, Reason: act.Reason})
	if err != nil {
		return "", err
	}
	// json.Marshal escapes line breaks inside strings, so an entry is one
	// line; drop `{"at":0,`.
	return string(b[len(`{"at":0,`):]), nil
}

// decodeAudit reads the audit field. A line that does not decode (never
// written by this package) is skipped rather than making the record
// unreadable: retries must still replay it.
func decodeAudit(s string) []store.AuditEntry {
	if s == "" {
		return nil
	}
	out := make([]store.AuditEntry, 0, strings.Count(s, "\n")+1)
	for line := range strings.SplitSeq(s, "\n") {
		var e auditEntry
		if json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
			continue
		}
		out = append(out, store.AuditEntry{At: time.UnixMilli(e.At), Actor: e.Actor, Action: e.Action, Reason: e.Reason})
	}
	return out
}

// OperatorRelease releases a record on an operator's word that its
// operation did not take effect (or must run again): the next retry with
// the same payload executes. Allowed from outcome_unknown, completed,
// released, and in_flight whose lease ran out; a live in-flight claim gives
// ErrConflict, a missing record ErrNotFound. Result fields are dropped,
// attempts and executions kept, Reason becomes "operator", and the record
// gets a new random token, so a late finisher of the old claim can no longer
// complete, release or hold it. ttl is the key's lifetime afterwards
// (default 24h). act is appended to the record's audit trail (the last
// MaxAuditEntries are kept) in the same step; its Actor is required. One
// script, atomic against a Claim arriving at the same moment. The record is
// returned as the script left it; with ErrConflict it is the current record
// (unchanged, no audit entry).
func (s *Store) OperatorRelease(ctx context.Context, id string, act store.Action, ttl time.Duration) (*store.Record, error) {
	ttl = cmp.Or(ttl, store.DefaultTTL)
	if ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL", store.ErrInvalidArgument)
	}
	entry, err := encodeAction(store.AuditRelease, act)
	if err != nil {
		return nil, err
	}
	return s.operator(ctx, "release", operatorReleaseScript, id, store.NewToken(), ms(ttl), entry)
}

// OperatorComplete records a verified outcome of a record's operation, which
// later retries replay: allowed from outcome_unknown, released, and in_flight
// whose lease ran out; completed or a live in-flight claim give ErrConflict,
// a missing record ErrNotFound. The record becomes completed with res
// (CompletedAt = now on the Redis clock, Reason "operator") under a new
// random token, so a late finisher of the old claim can no longer overwrite
// it; attempts and executions are kept. When res.Digest is empty and the
// body is not omitted, the digest of res.Body is stored. ttl is the key's
// lifetime afterwards (default 24h). act is appended to the record's audit
// trail in the same step, as for OperatorRelease. One script, atomic
// against a Claim arriving at the same moment. The record is returned as
// the script left it (with the body); with ErrConflict it is the current
// record (unchanged, no audit entry).
func (s *Store) OperatorComplete(ctx context.Context, id string, res store.Result, act store.Action, ttl time.Duration) (*store.Record, error) {
	res, ttl, err := store.OperatorCompletion(res, ttl)
	if err != nil {
		return nil, err
	}
	entry, err := encodeAction(store.AuditComplete, act)
	if err != nil {
		return nil, err
	}
	omitted := "0"
	if res.BodyOmitted {
		omitted = "1"
	}
	return s.operator(ctx, "complete", operatorCompleteScript, id, store.NewToken(),
		strconv.Itoa(res.Status), store.EncodeHeader(res.Header), res.Body, omitted,
		res.Digest, res.ExternalID, ms(ttl), entry, ms(store.DefaultTombstone))
}

// operator runs an operator script (reply: code + record) and maps its code
// to the record or ErrNotFound / ErrConflict.
func (s *Store) operator(ctx context.Context, op string, sc *goredis.Script, id string, args ...any) (*store.Record, error) {
	if !store.ValidID(id) {
		return nil, store.ErrInvalidID
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	code, rec, err := s.recordReply(sc.Run(ctx, s.client, s.keys(id), append([]any{id}, args...)...), id)
	if err != nil {
		return nil, fmt.Errorf("store: operator %s %s: %w", op, id, err)
	}
	switch {
	case code == codeNotFound || rec == nil:
		return nil, fmt.Errorf("%w: %s", store.ErrNotFound, id)
	case code == codeConflict:
		return rec, store.ConflictOf(rec)
	case code != codeDone:
		return nil, fmt.Errorf("store: operator %s %s: unexpected reply code %d", op, id, code)
	}
	return rec, nil
}
