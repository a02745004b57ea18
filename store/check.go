package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
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
	// Tombstone is how long the tombstone of a record an applied verdict
	// completes outlives it (0: none; see CompleteRequest.Tombstone).
	Tombstone time.Duration
	// Operator, when set, is who asked for the check and why: kept on the
	// record as an audit entry (action "verify") in the same step, when
	// the check is recorded.
	Operator *Action
}

// Fence is a record held as outcome unknown, as someone saw it: its id
// and the token of the claim it was held from. A check of it counts only
// while the record is still held under that claim, that is while the
// fence Holds the record.
type Fence struct{ id, token string }

// Fence is the fence of the record as it is now: its id and its token.
func (r *Record) Fence() Fence { return Fence{r.ID, r.Token} }

// Fence is the fence of the record once the claim has marked it unknown.
func (c *Claim) Fence() Fence { return Fence{c.req.ID, c.req.Token} }

// ID is the fenced record's id.
func (f Fence) ID() string { return f.id }

// Holds reports whether rec is still outcome_unknown under this fence.
func (f Fence) Holds(rec *Record) bool {
	return rec != nil && rec.State == StateUnknown && rec.ID == f.id && rec.Token == f.token
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
	fence Fence
	token string
}

// BeginCheck takes the check lease of the record fenced by f on e for lease,
// under a new check token (see Engine.BeginCheck for when it is refused).
// The lease is nil when it was refused; rec is the record as e left it
// (nil when it does not exist).
func BeginCheck(ctx context.Context, e CheckOps, f Fence, lease time.Duration, due bool) (*CheckLease, *Record, error) {
	token := NewToken()
	rec, ok, err := e.BeginCheck(ctx, f.id, f.token, token, lease, due)
	if err != nil || !ok {
		return nil, rec, err
	}
	return &CheckLease{ops: e, fence: f, token: token}, rec, nil
}

// End records the check and applies its verdict under the lease (see
// Engine.EndCheck): false, with the current record, when the record was
// resolved meanwhile or the lease ran out and another check took over.
func (l *CheckLease) End(ctx context.Context, r CheckReport) (*Record, bool, error) {
	return l.ops.EndCheck(ctx, CheckOutcome{ID: l.fence.id, ClaimToken: l.fence.token, CheckToken: l.token, CheckReport: r})
}

// Validate checks an outcome's arguments as every engine's EndCheck
// must (ErrInvalidID, ErrInvalidArgument).
func (o CheckOutcome) Validate() error {
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
	case o.Every < 0 || o.Next < 0 || o.TTL < 0 || o.Tombstone < 0:
		return bad("negative duration")
	case o.Entry.Verdict == VerdictApplied && (o.Result.Status < 100 || o.Result.Status > 599):
		return bad("result status %d is not an HTTP status", o.Result.Status)
	}
	return nil
}

func validVerdict(v string) bool {
	switch v {
	case VerdictApplied, VerdictNotApplied, VerdictInconclusive, VerdictError:
		return true
	}
	return false
}

// ValidateBeginCheck checks BeginCheck's arguments as every engine must:
// a valid id (ErrInvalidID), both tokens and a positive lease
// (ErrInvalidArgument).
func ValidateBeginCheck(id, claimToken, checkToken string, lease time.Duration) error {
	switch {
	case !validID(id):
		return ErrInvalidID
	case claimToken == "" || checkToken == "":
		return fmt.Errorf("%w: a check needs the claim token and a check token", ErrInvalidArgument)
	case lease <= 0:
		return fmt.Errorf("%w: the check lease must be positive", ErrInvalidArgument)
	}
	return nil
}
