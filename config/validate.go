package config

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/keying"
)

// Limits are facts from outside the rules that the rules must agree with.
// The zero Limits checks nothing more than the rules themselves.
type Limits struct {
	// OpTimeout is the record store's bound on each call (its op_timeout).
	// When set, every route's lock_lease must be longer: a claim whose
	// lease can run out while a store call on it may still land is no
	// claim.
	OpTimeout time.Duration
}

// maxMaxBody is the largest max_body: bodies are held in memory whole.
const maxMaxBody = 64 << 20

// Validate checks the rules and returns an ErrorList naming every problem
// by field path ("routes[1].on_unknown_outcome: ..."), or nil. It knows
// nothing of files or lines: Load and Parse add those. Validate is what
// checks rules given inline in Caddy's JSON.
//
// It checks: at least one route; names present, unique and made of
// A-Z a-z 0-9 _ . : - (1 to 64); operations likewise; match.path present,
// starting with "/" and a valid pattern; methods are HTTP tokens and not
// safe methods; at least one key template; every key and scope template
// parses (keying.ParseTemplate); fingerprint paths are not empty and
// ignore paths can be deleted (keying.FingerprintRule.Validate);
// durations are positive, ttl and lock_lease are at least 1s and every
// route's hold_ttl is at least its lock_lease; sizes are positive and
// max_body is at most 64 MiB; retry statuses are 3xx, 4xx or 5xx;
// enum fields hold one of their values; forward_key_header is a header
// name that the request does not need for itself (not Authorization,
// Host, Content-Length, Content-Type, Cookie, Transfer-Encoding or a
// hop-by-hop header), or "".
func (r *Rules) Validate() error {
	return r.ValidateWith(Limits{})
}

// ValidateWith is Validate, also checking the rules against l.
func (r *Rules) ValidateWith(l Limits) error {
	return r.check(l, true).err()
}

// check checks the rules; fromJSON adds hints for mistakes only JSON
// allows (bare numbers as durations).
func (r *Rules) check(l Limits, fromJSON bool) ErrorList {
	c := errorList{fromJSON: fromJSON}
	if r == nil || len(r.Routes) == 0 {
		c.add("routes", "at least one route is required")
		if r == nil {
			return c.list
		}
	}
	checkPolicy(&c, "defaults", &r.Defaults)
	names := make(map[string]int, len(r.Routes))
	for i := range r.Routes {
		checkRoute(&c, i, &r.Routes[i], names)
	}
	checkLeases(&c, r, l)
	return c.list
}

// setting is an effective duration and the field it comes from ("" for a
// built-in default).
type setting struct {
	d     Duration
	field string
}

func (s setting) from() string {
	if s.field == "" {
		return ", the default"
	}
	return ", from " + s.field
}

// checkLeases checks the durations that must agree with each other: a
// held record lives hold_ttl, so hold_ttl may not be shorter than
// lock_lease, and lock_lease must be longer than the store's op_timeout.
// A problem is reported once, at the most specific field that causes it;
// values that are wrong on their own were reported already.
func checkLeases(c *errorList, r *Rules, l Limits) {
	pick := func(d Duration, field string, inherited setting) setting {
		if d != 0 {
			return setting{d, field}
		}
		return inherited
	}
	check := func(lease, hold setting, prefix string) {
		if lease.d < Duration(time.Second) || hold.d <= 0 {
			return
		}
		if hold.d < lease.d {
			if hold.field != "" && strings.HasPrefix(hold.field, prefix) {
				src := lease.from()
				if strings.HasPrefix(lease.field, prefix) {
					src = ""
				}
				c.add(hold.field, "%s is shorter than lock_lease (%s%s): a held record must outlive the claim it was made from", hold.d, lease.d, src)
			} else {
				c.add(lease.field, "%s is longer than hold_ttl (%s%s): a held record must outlive the claim it was made from", lease.d, hold.d, hold.from())
			}
		}
		if l.OpTimeout > 0 && time.Duration(lease.d) <= l.OpTimeout && strings.HasPrefix(lease.field, prefix) {
			c.add(lease.field, "%s is not longer than the store's op_timeout (%s)", lease.d, l.OpTimeout)
		}
	}
	lease := pick(r.Defaults.LockLease, "defaults.lock_lease", setting{Duration(defaultLockLease), ""})
	hold := pick(r.Defaults.HoldTTL, "defaults.hold_ttl", setting{Duration(defaultHoldTTL), ""})
	if l.OpTimeout > 0 && lease.field == "" && time.Duration(lease.d) <= l.OpTimeout {
		c.add("defaults.lock_lease", "%s (the default) is not longer than the store's op_timeout (%s)", lease.d, l.OpTimeout)
	}
	check(lease, hold, "defaults.")
	for i := range r.Routes {
		p := &r.Routes[i].Policy
		if p.LockLease == 0 && p.HoldTTL == 0 {
			continue
		}
		prefix := "routes[" + strconv.Itoa(i) + "]."
		check(pick(p.LockLease, prefix+"lock_lease", lease), pick(p.HoldTTL, prefix+"hold_ttl", hold), prefix)
	}
}

func routeField(i int, field string) string {
	return "routes[" + strconv.Itoa(i) + "]." + field
}

func checkRoute(c *errorList, i int, rt *Route, names map[string]int) {
	f := func(field string) string { return routeField(i, field) }

	switch {
	case rt.Name == "":
		c.add(f("name"), "is required")
	case !validName(rt.Name):
		c.add(f("name"), "%s is not a valid name: use 1 to 64 of A-Z a-z 0-9 _ . : -", quote(rt.Name))
	default:
		if j, dup := names[rt.Name]; dup {
			c.add(f("name"), "%s is already the name of routes[%d]", quote(rt.Name), j)
		} else {
			names[rt.Name] = i
		}
	}
	if rt.Operation != "" && !validName(rt.Operation) {
		c.add(f("operation"), "%s is not a valid operation: use 1 to 64 of A-Z a-z 0-9 _ . : -", quote(rt.Operation))
	}

	switch p := rt.Match.Path; {
	case p == "":
		c.add(f("match.path"), "is required")
	case p[0] != '/':
		c.add(f("match.path"), "%s must start with \"/\"", quote(p))
	case !validPathPattern(p):
		c.add(f("match.path"), "%s is not a valid path pattern", quote(p))
	}
	if rt.Match.Methods != nil && len(rt.Match.Methods) == 0 {
		c.add(f("match.methods"), "must not be empty (leave it out to guard POST, PUT, PATCH and DELETE)")
	}
	for j, m := range rt.Match.Methods {
		field := f("match.methods[" + strconv.Itoa(j) + "]")
		switch up := strings.ToUpper(m); {
		case !httpguts.ValidHeaderFieldName(m): // a method is a token, as a header name is
			c.add(field, "%s is not an HTTP method", quote(m))
		case up == "GET" || up == "HEAD" || up == "OPTIONS" || up == "TRACE":
			c.add(field, "%s is a safe method and is never guarded; remove it", up)
		}
	}

	if len(rt.Key) == 0 {
		c.add(f("key"), "at least one key template is required, e.g. [\"{header.Idempotency-Key}\"]")
	}
	checkTemplates(c, f("key"), rt.Key)

	for j, p := range rt.Fingerprint.Body {
		if strings.TrimSpace(p) == "" {
			c.add(f("fingerprint.body["+strconv.Itoa(j)+"]"), "must not be an empty path")
		}
	}
	reported := len(c.list)
	for j, p := range rt.Fingerprint.Ignore {
		field := f("fingerprint.ignore[" + strconv.Itoa(j) + "]")
		switch {
		case strings.TrimSpace(p) == "":
			c.add(field, "must not be an empty path")
		case (keying.FingerprintRule{Ignore: []string{p}}).Validate() != nil:
			c.add(field, "%s cannot be deleted from a body: ignore paths are plain paths"+
				" (no queries, wildcards, modifiers or multipaths)", quote(p))
		}
	}
	rule := keying.FingerprintRule{Body: rt.Fingerprint.Body, Ignore: rt.Fingerprint.Ignore}
	if err := rule.Validate(); err != nil && len(c.list) == reported {
		c.add(f("fingerprint"), "%v", err)
	}

	checkPolicy(c, "routes["+strconv.Itoa(i)+"]", &rt.Policy)
}

func checkTemplates(c *errorList, field string, templates []string) {
	for j, s := range templates {
		if _, err := keying.ParseTemplate(s); err != nil {
			c.add(field+"["+strconv.Itoa(j)+"]", "%v", err)
		}
	}
}

// checkPolicy checks a policy; prefix is "defaults" or "routes[i]".
func checkPolicy(c *errorList, prefix string, p *Policy) {
	f := func(field string) string { return prefix + "." + field }

	checkDuration(c, f("ttl"), p.TTL, time.Second)
	checkDuration(c, f("lock_lease"), p.LockLease, time.Second)
	checkDuration(c, f("hold_ttl"), p.HoldTTL, 0)
	checkSize(c, f("max_body"), p.MaxBody, maxMaxBody)
	checkSize(c, f("max_response"), p.MaxResponse, 0)

	checkTemplates(c, f("scope"), p.Scope)

	if h := p.ForwardKeyHeader; h != nil && *h != "" {
		const other = "; choose another name, e.g. Idempotency-Key"
		switch lower := strings.ToLower(*h); {
		case !httpguts.ValidHeaderFieldName(*h):
			c.add(f("forward_key_header"), "%s is not a valid header name", quote(*h))
		case ownHeaders[lower]:
			c.add(f("forward_key_header"), "%s is a header the upstream needs from the request itself"+other, quote(*h))
		case hopHeaders[lower] || strings.HasPrefix(lower, "proxy-"):
			c.add(f("forward_key_header"), "%s is a hop-by-hop header, dropped on the way upstream"+other, quote(*h))
		}
	}

	for j, s := range p.RetryStatuses {
		field := f("retry_statuses[" + strconv.Itoa(j) + "]")
		switch {
		case s < 100 || s > 599:
			c.add(field, "%d is not an HTTP status (100 to 599)", s)
		case s <= 199:
			c.add(field, "%d is an informational status, never the answer to a call; it can never match", s)
		case s <= 299:
			c.add(field, "%d is a success status; only failures can be retried", s)
		}
	}

	checkEnum(c, f("on_unknown_outcome"), p.OnUnknownOutcome, OnUnknownHold, OnUnknownRelease, OnUnknownStore)
	checkEnum(c, f("on_store_error"), p.OnStoreError, OnStoreErrorFailClosed, OnStoreErrorFailOpen)
}

// Headers forward_key_header may not name: the request's own (ownHeaders)
// and hop-by-hop ones (hopHeaders, and every Proxy-*), in lower case.
var (
	ownHeaders = map[string]bool{"authorization": true, "host": true, "content-length": true,
		"content-type": true, "cookie": true, "transfer-encoding": true}
	hopHeaders = map[string]bool{"connection": true, "keep-alive": true, "te": true,
		"trailer": true, "upgrade": true}
)

// checkDuration checks a set (non-zero) duration is positive and at least
// min. Below a millisecond in JSON it is most likely a number of seconds
// written bare, which Caddy reads as nanoseconds.
func checkDuration(c *errorList, field string, d Duration, min time.Duration) {
	switch {
	case d < 0:
		c.add(field, "must be positive, got %s", d)
	case d > 0 && time.Duration(d) < min && c.fromJSON && time.Duration(d) < time.Millisecond:
		c.add(field, "must be at least %s, got %s (a bare number in Caddy's JSON is nanoseconds: write \"%ds\" for seconds)", min, d, int64(d))
	case d > 0 && time.Duration(d) < min:
		c.add(field, "must be at least %s, got %s", min, d)
	}
}

// checkSize checks a set (non-zero) size is positive and, when max is
// set, at most max.
func checkSize(c *errorList, field string, s, max Size) {
	switch {
	case s < 0:
		c.add(field, "must be positive, got %d", int64(s))
	case max > 0 && s > max:
		c.add(field, "must be at most %s, got %s", max.text(), s.text())
	}
}

// checkEnum checks a set (non-empty) value is one of values.
func checkEnum(c *errorList, field, v string, values ...string) {
	if v == "" {
		return
	}
	for _, ok := range values {
		if v == ok {
			return
		}
	}
	c.add(field, "%s", enumMessage(v, values))
}

func enumMessage(v string, values []string) string {
	return fmt.Sprintf("%s is not one of %s", quote(v), strings.Join(values, ", "))
}

// validName reports whether s is 1 to 64 of A-Z a-z 0-9 _ . : -
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// validPathPattern reports whether Caddy's path matcher can use p. Caddy
// compares patterns holding "%" in escaped space and treats a single
// leading or trailing "*" as a prefix or suffix match; every other pattern
// goes through path.Match, which never matches a malformed pattern, so
// such a pattern would silently guard nothing. Control characters never
// occur in a request path.
func validPathPattern(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] < ' ' || p[i] == 0x7f {
			return false
		}
	}
	if strings.Contains(p, "%") {
		return true
	}
	if strings.Count(p, "*") == 1 && strings.HasSuffix(p, "*") {
		return true
	}
	_, err := path.Match(p, "")
	return err == nil
}
