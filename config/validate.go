package config

import (
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/keying"
)

// Limits are facts from outside the rules that the rules must agree with.
// The zero Limits checks nothing more than the rules themselves.
type Limits struct {
	// OpTimeout is the record store's bound on each call (its op_timeout).
	// When set, every route's lock_lease must be longer: a claim whose
	// lease can run out while a store call on it may still land is no claim.
	OpTimeout time.Duration
}

// maxMaxBody is the largest max_body: bodies are held in memory whole.
const maxMaxBody = 64 << 20

// Headers forward_key_header may not name, in lower case: the request's
// own, and hop-by-hop ones (with every Proxy-*).
var (
	ownHeaders = []string{"authorization", "host", "content-length", "content-type", "cookie", "transfer-encoding"}
	hopHeaders = []string{"connection", "keep-alive", "te", "trailer", "upgrade"}
)

// validName matches names and operations.
var validName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`).MatchString

// Validate checks the constraints stated on the fields of Rules, Route
// and Policy, as for rules inline in Caddy's JSON, and the rules against
// l (the zero Limits: the rules alone): nil, or an ErrorList naming each
// problem's field (no file or line).
func (r *Rules) Validate(l Limits) error {
	if errs := r.check(l, &errorList{}); len(errs) > 0 {
		return errs
	}
	return nil
}

// check adds the rules' problems to c, which knows the fields set in a
// YAML file (where "" is a problem too), and returns them all.
func (r *Rules) check(l Limits, c *errorList) ErrorList {
	if r == nil || len(r.Routes) == 0 {
		c.add("routes", "at least one route is required")
		if r == nil {
			return c.list
		}
	}
	c.policy("defaults.", &r.Defaults)
	names := make(map[string]int, len(r.Routes))
	for i := range r.Routes {
		c.route(i, &r.Routes[i], names)
		checkVerify(c, i, &r.Routes[i], &r.Defaults)
		if len(c.list) == 0 { // the route resolves
			c.captured(i, &r.Routes[i], &r.Defaults)
		}
		c.sender(i, &r.Routes[i], &r.Defaults)
		c.statusLists(i, &r.Routes[i], &r.Defaults)
		c.protocol(i, &r.Routes[i], &r.Defaults)
	}
	c.mcpPaths(r)
	c.samePayload(r)
	c.leases(r, l)
	return c.list
}

func (c *errorList) route(i int, rt *Route, names map[string]int) {
	f := "routes[" + strconv.Itoa(i) + "]."
	switch j, dup := names[rt.Name]; {
	case rt.Name == "":
		c.add(f+"name", "is required")
	case !validName(rt.Name):
		c.add(f+"name", "%s is not a valid name: use 1 to 64 of A-Z a-z 0-9 _ . : -", quote(rt.Name))
	case dup:
		c.add(f+"name", "%s is already the name of routes[%d]", quote(rt.Name), j)
	default:
		names[rt.Name] = i
	}
	if rt.Operation == "" && c.isWritten(f+"operation") {
		c.add(f+"operation", "must not be empty (leave it out to use the route's name)")
	} else if rt.Operation != "" && !validName(rt.Operation) {
		c.add(f+"operation", "%s is not a valid operation: use 1 to 64 of A-Z a-z 0-9 _ . : -", quote(rt.Operation))
	}

	switch p := rt.Match.Path; {
	case p == "":
		c.add(f+"match.path", "is required")
	case p[0] != '/':
		c.add(f+"match.path", "%s must start with \"/\"", quote(p))
	case !validPathPattern(p):
		c.add(f+"match.path", "%s is not a valid path pattern", quote(p))
	}
	if rt.Match.Methods != nil && len(rt.Match.Methods) == 0 {
		c.add(f+"match.methods", "must not be empty (leave it out to guard POST, PUT, PATCH and DELETE)")
	}
	for j, m := range rt.Match.Methods {
		switch up := strings.ToUpper(m); {
		case !httpguts.ValidHeaderFieldName(m): // a method is a token, as a header name is
			c.add(at(f+"match.methods", j), "%s is not an HTTP method", quote(m))
		case up == "GET" || up == "HEAD" || up == "OPTIONS" || up == "TRACE":
			c.add(at(f+"match.methods", j), "%s is a safe method and is never guarded; remove it", up)
		}
	}

	if len(routeKey(rt)) == 0 {
		c.add(f+"key", "at least one key template is required, e.g. [\"{header.Idempotency-Key}\"]")
	}
	c.templates(f+"key", rt.Key)
	for j, p := range rt.Fingerprint.Body {
		if strings.TrimSpace(p) == "" {
			c.add(at(f+"fingerprint.body", j), "must not be an empty path")
		}
	}
	for j, p := range rt.Fingerprint.Ignore {
		switch {
		case strings.TrimSpace(p) == "":
			c.add(at(f+"fingerprint.ignore", j), "must not be an empty path")
		case (keying.FingerprintRule{Ignore: []string{p}}).Validate() != nil:
			c.add(at(f+"fingerprint.ignore", j), "%s cannot be deleted from a body: ignore paths are plain paths"+
				" (no queries, wildcards, modifiers or multipaths)", quote(p))
		}
	}
	if rt.ExternalID == "" && c.isWritten(f+"external_id") {
		c.add(f+"external_id", "must not be empty (leave it out to record no external id)")
	}
	c.signature(f, rt)
	c.policy(f, &rt.Policy)
}

func (c *errorList) templates(field string, templates []string) {
	for j, s := range templates {
		if _, err := keying.ParseTemplate(s); err != nil {
			c.add(at(field, j), "%v", err)
		}
	}
}

// policy checks a policy; f is "defaults." or "routes[i].".
func (c *errorList) policy(f string, p *Policy) {
	c.duration(f+"ttl", p.TTL, time.Second)
	c.duration(f+"lock_lease", p.LockLease, time.Second)
	c.duration(f+"hold_ttl", p.HoldTTL, 0)
	for _, s := range []struct {
		field    string
		v, limit Size
	}{{"max_body", p.MaxBody, maxMaxBody}, {"max_response", p.MaxResponse, 0}} {
		switch {
		case s.v < 0:
			c.add(f+s.field, "must be positive, got %d", int64(s.v))
		case s.limit > 0 && s.v > s.limit:
			c.add(f+s.field, "must be at most %s, got %s", s.limit.text(), s.v.text())
		}
	}
	c.templates(f+"scope", p.Scope)

	const other = "; choose another name, e.g. Idempotency-Key"
	if h := p.ForwardKeyHeader; h != nil && *h != "" {
		switch lower := strings.ToLower(*h); {
		case !httpguts.ValidHeaderFieldName(*h):
			c.add(f+"forward_key_header", "%s is not a valid header name", quote(*h))
		case slices.Contains(ownHeaders, lower):
			c.add(f+"forward_key_header", "%s is a header the upstream needs from the request itself"+other, quote(*h))
		case slices.Contains(hopHeaders, lower) || strings.HasPrefix(lower, "proxy-"):
			c.add(f+"forward_key_header", "%s is a hop-by-hop header, dropped on the way upstream"+other, quote(*h))
		}
	}
	for j, s := range p.RetryStatuses {
		switch {
		case s < 100 || s > 599:
			c.add(at(f+"retry_statuses", j), "%d is not an HTTP status (100 to 599)", s)
		case s <= 199:
			c.add(at(f+"retry_statuses", j), "%d is an informational status, never the answer to a call; it can never match", s)
		case s <= 299:
			c.add(at(f+"retry_statuses", j), "%d is a success status; only failures can be retried", s)
		}
	}
	c.storeStatuses(f, p)
	c.retention(f, p)
	for j, name := range p.RedactFields {
		if n := strings.TrimSpace(name); n == "" || len(n) > 128 || strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			c.add(at(f+"redact_fields", j), "%s is not a field name (1 to 128 characters, no control characters)", quote(name))
		}
	}
	c.recovery(f, p)
	enum(c, f+"on_unknown_outcome", p.OnUnknownOutcome, OnUnknownHold, OnUnknownRelease, OnUnknownStore)
	enum(c, f+"on_redirect", p.OnRedirect, OnRedirectRelease, OnRedirectStore)
	enum(c, f+"on_store_error", p.OnStoreError, OnStoreErrorFailClosed, OnStoreErrorFailOpen)
	enum(c, f+"mode", p.Mode, ModeEnforce, ModeObserve)
	enum(c, f+"on_in_flight", p.OnInFlight, OnInFlightReject, OnInFlightWait)
	c.duration(f+"in_flight_wait", p.InFlightWait, minInFlightWait)
	switch {
	case time.Duration(p.InFlightWait) > maxInFlightWait:
		c.add(f+"in_flight_wait", "must be at most %s, got %s: a client held that long has given up", maxInFlightWait, p.InFlightWait)
	case p.InFlightWait != 0 && p.OnInFlight == OnInFlightReject:
		c.add(f+"in_flight_wait", "is set, but on_in_flight is reject here: set on_in_flight: wait, or leave in_flight_wait out")
	}
}

// The bounds of in_flight_wait.
const (
	minInFlightWait = 10 * time.Millisecond
	maxInFlightWait = 5 * time.Minute
)

// duration checks a set (non-zero) duration is positive and at least min.
// Below a millisecond in JSON it is most likely a number of seconds
// written bare, which Caddy reads as nanoseconds.
func (c *errorList) duration(field string, d Duration, min time.Duration) {
	switch {
	case d < 0:
		c.add(field, "must be positive, got %s", d)
	case d > 0 && time.Duration(d) < min && c.lines == nil && time.Duration(d) < time.Millisecond:
		c.add(field, "must be at least %s, got %s (a bare number in Caddy's JSON is nanoseconds: write \"%ds\" for seconds)", min, d, int64(d))
	case d > 0 && time.Duration(d) < min:
		c.add(field, "must be at least %s, got %s", min, d)
	}
}

// leases checks the durations that must agree with each other: an
// in-flight record lives hold_ttl, so hold_ttl may not be shorter than
// lock_lease, and lock_lease must be longer than the store's op_timeout.
// A problem is reported once, at the most specific field that causes it.
func (c *errorList) leases(r *Rules, l Limits) {
	type setting struct {
		d           Duration
		field, from string // field is "" for the built-in default
	}
	or := func(s setting, d Duration, field string) setting {
		if d != 0 {
			return setting{d, field, "from " + field}
		}
		return s
	}
	lease := or(setting{Duration(defaultLockLease), "", "the default"}, r.Defaults.LockLease, "defaults.lock_lease")
	hold := or(setting{Duration(defaultHoldTTL), "", "the default"}, r.Defaults.HoldTTL, "defaults.hold_ttl")
	for i := -1; i < len(r.Routes); i++ {
		lease, hold, p := lease, hold, "defaults."
		if i >= 0 {
			p = "routes[" + strconv.Itoa(i) + "]."
			lease, hold = or(lease, r.Routes[i].LockLease, p+"lock_lease"), or(hold, r.Routes[i].HoldTTL, p+"hold_ttl")
		}
		own := func(s setting) bool { return strings.HasPrefix(s.field, p) }
		switch {
		case lease.d < Duration(time.Second) || hold.d <= 0 || i >= 0 && !own(lease) && !own(hold):
			continue // wrong on their own, or as in the defaults
		case hold.d < lease.d && own(hold) && own(lease):
			c.add(hold.field, "%s is shorter than lock_lease (%s)"+outlive, hold.d, lease.d)
		case hold.d < lease.d && own(hold):
			c.add(hold.field, "%s is shorter than lock_lease (%s, %s)"+outlive, hold.d, lease.d, lease.from)
		case hold.d < lease.d:
			c.add(lease.field, "%s is longer than hold_ttl (%s, %s)"+outlive, lease.d, hold.d, hold.from)
		}
		switch {
		case l.OpTimeout == 0 || time.Duration(lease.d) > l.OpTimeout:
		case own(lease):
			c.add(lease.field, "%s is not longer than the store's op_timeout (%s)", lease.d, l.OpTimeout)
		case i < 0:
			c.add(p+"lock_lease", "%s (the default) is not longer than the store's op_timeout (%s)", lease.d, l.OpTimeout)
		}
	}
}

const outlive = ": a held record must outlive the claim it was made from"

// enum checks a value set (or written in the file) is one of values.
func enum[T ~string](c *errorList, field string, v T, values ...T) {
	if (v != "" || c.isWritten(field)) && !slices.Contains(values, v) {
		names := make([]string, len(values))
		for i, s := range values {
			names[i] = string(s)
		}
		c.add(field, "%s is not one of %s", quote(string(v)), strings.Join(names, ", "))
	}
}

// at returns the field of element j of the list field.
func at(field string, j int) string { return field + "[" + strconv.Itoa(j) + "]" }

// validPathPattern reports whether Caddy's path matcher can use p: it takes
// patterns with "%" or a single trailing "*" as they are, and gives the rest
// to path.Match, which never matches a malformed one. Control characters
// never occur in a request path.
func validPathPattern(p string) bool {
	_, err := path.Match(p, "")
	return !strings.ContainsFunc(p, unicode.IsControl) &&
		(err == nil || strings.Contains(p, "%") || strings.Count(p, "*") == 1 && strings.HasSuffix(p, "*"))
}
