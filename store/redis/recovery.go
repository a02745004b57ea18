package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
)

// NotDone records a "not done" execution under its claim (one script).
func (s *Store) NotDone(ctx context.Context, req store.NotDoneRequest) (store.NotDoneOutcome, error) {
	req, err := store.CheckNotDone(req)
	if err != nil {
		return store.NotDoneLost, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	n, err := s.run(ctx, "not done", req.ID, notDoneScript, s.keys(req.ID),
		req.ID, req.Token, strconv.Itoa(req.Status), ms(req.TTL), ms(req.HoldTTL),
		strconv.FormatInt(req.MaxExecutions, 10), flag(req.Unknown), req.ReleasedReason(), s.NoticeChannel(), s.notices.flag()).Int64()
	if err != nil {
		return store.NotDoneLost, fmt.Errorf("store: not done %s: %w", req.ID, err)
	}
	return store.NotDoneOutcome(n), nil
}

// Redrive claims a record for an operator's re-drive under req.Token
// (one script, atomic against claims): allowed where RedriveRefusal
// allows it. The record becomes in flight (a new lease, executions+1,
// the result fields dropped) and act is added to its audit trail. It
// returns the record as left, with its kept request; with an
// ErrConflict, the record as it is.
func (s *Store) Redrive(ctx context.Context, req store.RedriveRequest) (*store.Record, error) {
	req, err := store.CheckRedrive(req)
	if err != nil {
		return nil, err
	}
	entry, err := encodeAction(store.AuditRun, req.Act)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	code, rec, err := s.recordReply(redriveScript.Run(ctx, s.client, s.keys(req.ID),
		req.ID, req.Token, ms(req.Lease), ms(req.HoldTTL), entry), req.ID)
	if err != nil {
		return nil, fmt.Errorf("store: redrive %s: %w", req.ID, err)
	}
	switch {
	case code == codeNotFound || rec == nil:
		return nil, fmt.Errorf("%w: %s", store.ErrNotFound, req.ID)
	case code == codeConflict:
		if why := store.RedriveRefusal(rec, s.redisNow()); why != nil {
			return rec, why
		}
		return rec, store.ConflictOf(rec)
	case code != codeDone:
		return nil, fmt.Errorf("store: redrive %s: unexpected reply code %d", req.ID, code)
	}
	return rec, nil
}

// flag is b as a script argument: "1" or "0".
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// decodeAnswers reads the answers as the claim part keeps them: "at
// status" lines, oldest first. A line that does not read is skipped.
func decodeAnswers(s string) []store.Answer {
	if s == "" {
		return nil
	}
	out := make([]store.Answer, 0, strings.Count(s, "\n")+1)
	for line := range strings.SplitSeq(s, "\n") {
		at, status, ok := strings.Cut(line, " ")
		a, err1 := strconv.ParseInt(at, 10, 64)
		st, err2 := strconv.Atoi(status)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		out = append(out, store.Answer{At: time.UnixMilli(a), Status: st})
	}
	return out
}
