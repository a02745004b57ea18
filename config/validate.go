package config

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keying"
)

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
// durations are positive and lock_lease is at least 1s; sizes are
// positive and max_body is at most MaxBodyLimit; retry statuses are in 100..599 and not 2xx; enum fields hold
// one of their values; forward_key_header is a header name or "".
func (r *Rules) Validate() error {
	return r.check().err()
}

func (r *Rules) check() ErrorList {
	var c errorList
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
	return c.list
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
		case !isToken(m):
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

	checkDuration(c, f("ttl"), p.TTL, 0)
	checkDuration(c, f("lock_lease"), p.LockLease, time.Second)
	checkDuration(c, f("hold_ttl"), p.HoldTTL, 0)
	checkSize(c, f("max_body"), p.MaxBody)
	if p.MaxBody > MaxBodyLimit {
		c.add(f("max_body"), "must be at most %s (the largest request body the gateway holds), got %s (%d bytes)",
			Size(MaxBodyLimit), p.MaxBody, int64(p.MaxBody))
	}
	checkSize(c, f("max_response"), p.MaxResponse)

	checkTemplates(c, f("scope"), p.Scope)

	if h := p.ForwardKeyHeader; h != nil && *h != "" && !isToken(*h) {
		c.add(f("forward_key_header"), "%s is not a valid header name", quote(*h))
	}

	for j, s := range p.RetryStatuses {
		field := f("retry_statuses[" + strconv.Itoa(j) + "]")
		switch {
		case s < 100 || s > 599:
			c.add(field, "%d is not an HTTP status (100 to 599)", s)
		case s >= 200 && s <= 299:
			c.add(field, "%d is a success status; only failures can be retried", s)
		}
	}

	checkEnum(c, f("on_unknown_outcome"), p.OnUnknownOutcome, OnUnknownHold, OnUnknownRelease, OnUnknownStore)
	checkEnum(c, f("on_store_error"), p.OnStoreError, OnStoreErrorFailClosed, OnStoreErrorFailOpen)
}

// checkDuration checks a set (non-zero) duration is positive and at least
// min.
func checkDuration(c *errorList, field string, d Duration, min time.Duration) {
	switch {
	case d < 0:
		c.add(field, "must be positive, got %s", d)
	case d > 0 && time.Duration(d) < min:
		c.add(field, "must be at least %s, got %s", min, d)
	}
}

func checkSize(c *errorList, field string, s Size) {
	if s < 0 {
		c.add(field, "must be positive, got %d", int64(s))
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

// isToken reports whether s is an RFC 9110 token (methods, header names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
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
