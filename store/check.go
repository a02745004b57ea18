package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// Verification: a record held as outcome unknown on a route that says how
// to look the operation up by its key (the route's verify rule) is checked
// by the gateways, one check at a time, before an operator is needed. The
// claim keeps the resolved check on the record (ClaimRequest.Check), so any
// gateway can run it later without the request. A check is fenced twice:
// by the check lease (BeginCheck), so no two checks of one record run at
// once, and by the claim token the record was held under, so a verdict
// never lands on a record that an operator or a late real result resolved
// meanwhile (EndCheck).

// Check verdicts: what one check found.
const (
	// VerdictApplied: the lookup found the operation's result.
	VerdictApplied = "applied"
	// VerdictNotApplied: the lookup answered that the operation did not
	// take effect.
	VerdictNotApplied = "not_applied"
	// VerdictInconclusive: the lookup answered something else (another
	// status, a body that is not JSON, one too large, an answer about
	// another operation or a list of several).
	VerdictInconclusive = "inconclusive"
	// VerdictError: the lookup gave no answer (connection refused, a
	// timeout, a check URL that does not resolve).
	VerdictError = "error"
)

// Reasons of records that a check resolved.
const (
	// ReasonVerified: completed with the lookup's answer.
	ReasonVerified = "verified"
	// ReasonVerifiedNotApplied: released after NotFoundChecks "not
	// applied" answers; the next retry executes.
	ReasonVerifiedNotApplied = "verified_not_applied"
)

// MaxCheckEntries is how many checks a record keeps, the newest.
const MaxCheckEntries = 20

// Check is a resolved lookup: the request that asks the upstream whether
// the operation took effect. It carries no headers (those come from the
// route's config when the check runs, and may be secret).
type Check struct {
	Method string
	URL    string
	// After is how long after the record is held the first scheduled
	// check is due.
	After time.Duration
	// Match lists the values the lookup's answer must hold for the
	// operation to be found (the route's found.match, resolved from the
	// request), sorted by path; nil for none.
	Match []CheckMatch
}

// CheckMatch is a value a lookup's answer must hold: the text at a JSON
// path (gjson syntax).
type CheckMatch struct {
	Path  string
	Value string
}

// Limits of a check's Match.
const (
	MaxCheckMatches    = 16
	MaxCheckMatchPath  = 256
	MaxCheckMatchValue = 1024
)

// IsZero reports whether c is no check.
func (c Check) IsZero() bool { return c.URL == "" }

// Validate checks a claim's check as every engine must: none, or a
// method that is an HTTP token, a URL without white space or control
// characters (at most 4096 bytes), and an After that is not negative.
func (c Check) Validate() error {
	if c.IsZero() {
		if c.Method != "" {
			return fmt.Errorf("%w: check: a method without a URL", ErrInvalidArgument)
		}
		return nil
	}
	switch {
	case !isToken(c.Method):
		return fmt.Errorf("%w: check: method %q is not an HTTP method", ErrInvalidArgument, c.Method)
	case len(c.URL) > 4096 || strings.ContainsFunc(c.URL, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("%w: check: the URL is longer than 4096 bytes or has white space or control characters", ErrInvalidArgument)
	case c.After < 0:
		return fmt.Errorf("%w: check: negative after", ErrInvalidArgument)
	case len(c.Match) > MaxCheckMatches:
		return fmt.Errorf("%w: check: more than %d match values", ErrInvalidArgument, MaxCheckMatches)
	}
	for _, m := range c.Match {
		if m.Path == "" || len(m.Path) > MaxCheckMatchPath || len(m.Value) > MaxCheckMatchValue || !utf8.ValidString(m.Path) || !utf8.ValidString(m.Value) {
			return fmt.Errorf("%w: check: a match path must be 1 to %d bytes and its value at most %d, both UTF-8", ErrInvalidArgument, MaxCheckMatchPath, MaxCheckMatchValue)
		}
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// stored is the check's stored form, "METHOD URL" ("" for none), and
// when it has match values, a line feed (never in a URL) and their
// EncodeCheckMatch form.
func (c Check) stored() string {
	if c.IsZero() {
		return ""
	}
	if len(c.Match) > 0 {
		return c.Method + " " + c.URL + "\n" + EncodeCheckMatch(c.Match)
	}
	return c.Method + " " + c.URL
}

// checkOf reads a check's stored form.
func checkOf(stored string, after time.Duration) Check {
	line, match, _ := strings.Cut(stored, "\n")
	method, url, _ := strings.Cut(line, " ")
	return Check{Method: method, URL: url, After: after, Match: DecodeCheckMatch(match)}
}

// EncodeCheckMatch encodes match values for an engine to store: a JSON
// array of [path, value] pairs ("" for none).
func EncodeCheckMatch(m []CheckMatch) string {
	if len(m) == 0 {
		return ""
	}
	pairs := make([][2]string, len(m))
	for i, v := range m {
		pairs[i] = [2]string{v.Path, v.Value}
	}
	b, _ := json.Marshal(pairs)
	return string(b)
}

// DecodeCheckMatch decodes what EncodeCheckMatch made; nil for "" (and
// for text it never made, which then matches nothing and is no check of
// anything: see caddymodule's lookup).
func DecodeCheckMatch(s string) []CheckMatch {
	if s == "" {
		return nil
	}
	var pairs [][2]string
	if json.Unmarshal([]byte(s), &pairs) != nil {
		return []CheckMatch{{Path: "", Value: s}}
	}
	m := make([]CheckMatch, len(pairs))
	for i, p := range pairs {
		m[i] = CheckMatch{Path: p[0], Value: p[1]}
	}
	return m
}

// Normalized is c as a record gives it back: After in whole
// milliseconds, no empty Match.
func (c Check) Normalized() Check {
	if c.IsZero() {
		return Check{}
	}
	c.After = time.Duration(msCeil(c.After)) * time.Millisecond
	if len(c.Match) == 0 {
		c.Match = nil
	}
	return c
}

// CheckEntry is one check kept on a record.
type CheckEntry struct {
	At      time.Time // the store's clock when the check ended
	Status  int       // the lookup's HTTP status; 0 when it gave none
	Verdict string    // one of the Verdict constants
}

// CheckOutcome ends a check: EndCheck records it and applies its verdict.
type CheckOutcome struct {
	// ID is the record; ClaimToken the token it was held under and
	// CheckToken the check lease's, as given to BeginCheck.
	ID, ClaimToken, CheckToken string
	CheckReport
}

// CheckReport is what a check found and what follows from it: the part
// of a CheckOutcome that a CheckLease's End takes.
type CheckReport struct {
	// Entry is what the check found (At is set by the store).
	Entry CheckEntry
	// Result is what a retry replays when the verdict is applied: the
	// lookup's status (or the route's replay_status), body and
	// Content-Type, and the external id it found.
	Result Result
	// NotFoundChecks is how many counted "not applied" answers in a row
	// release the record (at least 1).
	NotFoundChecks int
	// Every is the least time between two counted "not applied" answers:
	// one that comes sooner after the last counted one is recorded but
	// does not count.
	Every time.Duration
	// Next is how long until the next scheduled check; 0 when none is
	// scheduled (its attempts are used up).
	Next time.Duration
	// TTL is how long a completed or released record lives (default 24h).
	TTL time.Duration
	// Operator, when set, is who asked for the check and why: kept on the
	// record as an audit entry (action "verify") in the same step, when
	// the check is recorded.
	Operator *Action
}

// Held is a record held as outcome unknown, as someone saw it: its id and
// the token of the claim it was held from. A check of it counts only
// while the record is still held under that claim.
type Held struct{ id, token string }

// Held is the hold the record is under, when it is outcome_unknown.
func (r *Record) Held() Held { return Held{r.ID, r.Token} }

// Held is the hold the claim leaves once it is marked unknown.
func (c *Claim) Held() Held { return Held{c.req.ID, c.req.Token} }

// ID is the held record's id.
func (h Held) ID() string { return h.id }

// Of reports whether rec is still outcome_unknown under this hold.
func (h Held) Of(rec *Record) bool {
	return rec != nil && rec.State == StateUnknown && rec.ID == h.id && rec.Token == h.token
}

// CheckOps are the calls of an Engine that a CheckLease makes.
type CheckOps interface {
	BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*Record, bool, error)
	EndCheck(ctx context.Context, o CheckOutcome) (*Record, bool, error)
}

// CheckLease is the right to run one verification check of a held record
// and record its verdict, which no other check has meanwhile.
type CheckLease struct {
	ops   CheckOps
	held  Held
	token string
}

// BeginCheck takes the check lease of the record held as h on e for lease,
// under a new check token (see Store.BeginCheck for when it is refused).
// The lease is nil when it was refused; rec is the record as e left it
// (nil when it does not exist).
func BeginCheck(ctx context.Context, e CheckOps, h Held, lease time.Duration, due bool) (*CheckLease, *Record, error) {
	token := NewToken()
	rec, ok, err := e.BeginCheck(ctx, h.id, h.token, token, lease, due)
	if err != nil || !ok {
		return nil, rec, err
	}
	return &CheckLease{ops: e, held: h, token: token}, rec, nil
}

// End records the check and applies its verdict under the lease (see
// Store.EndCheck): false, with the current record, when the record was
// resolved meanwhile or the lease ran out and another check took over.
func (l *CheckLease) End(ctx context.Context, r CheckReport) (*Record, bool, error) {
	return l.ops.EndCheck(ctx, CheckOutcome{ID: l.held.id, ClaimToken: l.held.token, CheckToken: l.token, CheckReport: r})
}

// BeginCheck takes the check lease of record id for lease (the store's
// clock): the right to run one check and end it with EndCheck under
// checkToken. It succeeds only while the record is outcome_unknown under
// claimToken and no other check holds a live lease; with due, also only
// once the next scheduled check's time has come (scheduled checks ask so;
// a retry's and an operator's check do not). A BeginCheck retried with the
// same checkToken while its lease lives succeeds again. It returns the
// record as the script left it (nil when it does not exist) and whether
// the lease is the caller's.
func (s *Store) BeginCheck(ctx context.Context, id, claimToken, checkToken string, lease time.Duration, due bool) (*Record, bool, error) {
	switch {
	case !validID(id):
		return nil, false, ErrInvalidID
	case claimToken == "" || checkToken == "":
		return nil, false, fmt.Errorf("%w: a check needs the claim token and a check token", ErrInvalidArgument)
	case lease <= 0:
		return nil, false, fmt.Errorf("%w: the check lease must be positive", ErrInvalidArgument)
	}
	dueArg := "0"
	if due {
		dueArg = "1"
	}
	return s.checkScript(ctx, "begin check", beginCheckScript, s.keys(id)[:1], id,
		claimToken, checkToken, ms(lease), dueArg)
}

// EndCheck records a check under its lease and applies its verdict in the
// same atomic step, while the record is still outcome_unknown under the
// claim token and the check token is the lease's (else it changes nothing
// and returns false with the current record):
//
//   - applied: completed with o.Result (CompletedAt now, Reason
//     "verified", the check token as the record's token, so the held
//     claim's late finisher can no longer overwrite it), lifetime o.TTL;
//   - not applied: the streak of counted "not applied" answers grows by
//     one, when it is the first or comes at least o.Every after the last
//     counted one; once it reaches o.NotFoundChecks the record is
//     released (Reason "verified_not_applied", the check token as its
//     token, lifetime o.TTL) and the next claim executes;
//   - anything else, or a streak still short: the record stays held, the
//     streak kept, the next check due o.Next from now (none when 0).
//
// The entry is kept (the last MaxCheckEntries), CheckCount grows, the
// lease ends, and an operator's check is added to the audit trail. The
// record is returned as the script left it.
func (s *Store) EndCheck(ctx context.Context, o CheckOutcome) (*Record, bool, error) {
	if err := o.check(); err != nil {
		return nil, false, err
	}
	ttl := orDefault(o.TTL, DefaultTTL)
	entry := ""
	if o.Operator != nil {
		var err error
		if entry, err = encodeAction(AuditVerify, *o.Operator); err != nil {
			return nil, false, err
		}
	}
	res := o.Result
	if o.Entry.Verdict == VerdictApplied && res.Digest == "" {
		sum := sha256.Sum256(res.Body)
		res.Digest = hex.EncodeToString(sum[:])
	}
	return s.checkScript(ctx, "end check", endCheckScript, s.keys(o.ID), o.ID,
		o.ClaimToken, o.CheckToken, strconv.Itoa(o.Entry.Status), o.Entry.Verdict,
		strconv.Itoa(o.NotFoundChecks), ms(o.Every), ms(o.Next), ms(ttl),
		strconv.Itoa(res.Status), encodeHeader(res.Header), res.Body, res.Digest, res.ExternalID, entry)
}

// check validates an outcome as every engine must.
func (o CheckOutcome) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: check outcome: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	switch {
	case !validID(o.ID):
		return ErrInvalidID
	case o.ClaimToken == "" || o.CheckToken == "":
		return bad("no claim or check token")
	case !validVerdict(o.Entry.Verdict):
		return bad("verdict %q is not one of applied, not_applied, inconclusive, error", o.Entry.Verdict)
	case o.Entry.Status != 0 && (o.Entry.Status < 100 || o.Entry.Status > 599):
		return bad("status %d is not an HTTP status", o.Entry.Status)
	case o.NotFoundChecks < 1:
		return bad("not found checks %d is below 1", o.NotFoundChecks)
	case o.Every < 0 || o.Next < 0 || o.TTL < 0:
		return bad("negative duration")
	case o.Entry.Verdict == VerdictApplied && (o.Result.Status < 100 || o.Result.Status > 599):
		return bad("result status %d is not an HTTP status", o.Result.Status)
	}
	return nil
}

// Validate checks an outcome's arguments as EndCheck does, for every
// engine (ErrInvalidID, ErrInvalidArgument).
func (o CheckOutcome) Validate() error { return o.check() }

func validVerdict(v string) bool {
	switch v {
	case VerdictApplied, VerdictNotApplied, VerdictInconclusive, VerdictError:
		return true
	}
	return false
}

// checkScript runs a check script (reply: code, now, record) and returns
// the record and whether the code is a success.
func (s *Store) checkScript(ctx context.Context, op string, sc *redis.Script, keys []string, id string, args ...any) (*Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	code, rec, err := s.recordReply(s.run(ctx, op, id, sc, keys, append([]any{id}, args...)...), id)
	if err != nil {
		return nil, false, fmt.Errorf("store: %s %s: %w", op, id, err)
	}
	return rec, code != 0 && rec != nil, nil
}

// recordReply reads a {code, now ms, record} reply.
func (s *Store) recordReply(cmd *redis.Cmd, id string) (int64, *Record, error) {
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
func decodeChecks(r *Record, c *[numClaimFields]string) {
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
func decodeCheckLog(s string) []CheckEntry {
	if s == "" {
		return nil
	}
	out := make([]CheckEntry, 0, strings.Count(s, "\n")+1)
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		at, err1 := strconv.ParseInt(f[0], 10, 64)
		status, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil || !validVerdict(f[2]) {
			continue
		}
		out = append(out, CheckEntry{At: time.UnixMilli(at), Status: status, Verdict: f[2]})
	}
	return out
}
