package redis

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/store"
	goredis "github.com/redis/go-redis/v9"
)

// storedCheck is a check's stored form, "METHOD URL" ("" for none), and
// when it has match values, a line feed (never in a URL) and their
// EncodeCheckMatch form.
func storedCheck(c store.Check) string {
	if c.IsZero() {
		return ""
	}
	if len(c.Match) > 0 {
		return c.Method + " " + c.URL + "\n" + store.EncodeCheckMatch(c.Match)
	}
	return c.Method + " " + c.URL
}

// checkOf reads a check's stored form.
func checkOf(stored string, after time.Duration) store.Check {
	line, match, _ := strings.Cut(stored, "\n")
	method, url, _ := strings.Cut(line, " ")
	return store.Check{Method: method, URL: url, After: after, Match: store.DecodeCheckMatch(match)}
}

// BeginCheck runs the begin-check script on record id (see
// store.Engine.BeginCheck).
func (s *Store) BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*store.Record, bool, error) {
	if err := store.ValidateBeginCheck(id, claimToken, checkToken, lease); err != nil {
		return nil, false, err
	}
	dueArg := "0"
	if due {
		dueArg = "1"
	}
	return s.checkScript(ctx, "begin check", beginCheckScript, s.keys(id)[:1], id,
		claimToken, checkToken, ms(lease), dueArg)
}

// EndCheck runs the end-check script, which records a check and applies
// its verdict in one atomic step (see store.Engine.EndCheck).
func (s *Store) EndCheck(ctx context.Context, o store.CheckOutcome) (*store.Record, bool, error) {
	if err := o.Validate(); err != nil {
		return nil, false, err
	}
	ttl := cmp.Or(o.TTL, store.DefaultTTL)
	entry := ""
	if o.Operator != nil {
		var err error
		if entry, err = encodeAction(store.AuditVerify, *o.Operator); err != nil {
			return nil, false, err
		}
	}
	res := o.Result
	if o.Entry.Verdict == store.VerdictApplied && res.Digest == "" {
		sum := sha256.Sum256(res.Body)
		res.Digest = hex.EncodeToString(sum[:])
	}
	return s.checkScript(ctx, "end check", endCheckScript, s.keys(o.ID), o.ID,
		o.ClaimToken, o.CheckToken, strconv.Itoa(o.Entry.Status), o.Entry.Verdict,
		strconv.Itoa(o.NotFoundChecks), ms(o.Every), ms(o.Next), ms(ttl),
		strconv.Itoa(res.Status), store.EncodeHeader(res.Header), res.Body, res.Digest, res.ExternalID, entry,
		strconv.FormatInt(store.Millis(o.Tombstone), 10))
}

// checkScript runs a check script (reply: code, now, record) and returns
// the record and whether the code is a success.
func (s *Store) checkScript(ctx context.Context, op string, sc *goredis.Script, keys []string, id string, args ...any) (*store.Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	code, rec, err := s.recordReply(s.run(ctx, op, id, sc, keys, append([]any{id}, args...)...), id)
	if err != nil {
		return nil, false, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	return rec, code != 0 && rec != nil, nil
}

// recordReply reads a {code, now ms, record} reply.
func (s *Store) recordReply(cmd *goredis.Cmd, id string) (int64, *store.Record, error) {
	v, err := cmd.Slice()
	if err != nil {
		return 0, nil, err
	}
	if len(v) != 3 {
		return 0, nil, errShortReply
	}
	code, _ := v[0].(int64)
	stored, ok := v[2].(string)
	if !ok {
		return code, nil, nil
	}
	rec, _, err := decodeBlob(id, stored, false)
	return code, rec, err
}

// decodeChecks fills the verification fields of r from its claim part.
func decodeChecks(r *store.Record, c *[numClaimFields]string) {
	if c[cCheck] != "" {
		r.Check = checkOf(c[cCheck], time.Duration(intOf(c[cCheckAfter]))*time.Millisecond)
	}
	r.Checks = decodeCheckLog(c[cChecks])
	r.CheckCount, r.NotFoundStreak = intOf(c[cCheckCount]), intOf(c[cNotFoundStreak])
	r.NextCheck, r.CheckLeaseUntil = msOf(c[cNextCheck]), msOf(c[cCheckLeaseUntil])
}

// decodeCheckLog reads the check log: "at status verdict" lines. A line
// that does not read (never written by this package) is skipped rather
// than making the record unreadable.
func decodeCheckLog(s string) []store.CheckEntry {
	if s == "" {
		return nil
	}
	out := make([]store.CheckEntry, 0, strings.Count(s, "\n")+1)
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		at, err1 := strconv.ParseInt(f[0], 10, 64)
		status, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil || !store.ValidVerdict(f[2]) {
			continue
		}
		out = append(out, store.CheckEntry{At: time.UnixMilli(at), Status: status, Verdict: f[2]})
	}
	return out
}
