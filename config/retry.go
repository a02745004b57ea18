package config

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/keying"
)

// Built-in defaults and limits of the recovery path.
const (
	defaultMaxExecutions = 5
	maxMaxExecutions     = 1000
	maxBreakerFailures   = 10000
	minCoolDown          = time.Second
	maxCoolDown          = 24 * time.Hour
	maxOwnerLen          = 128
)

// Retry is a route's retry budget and circuit breaker: how many times one
// operation may be executed while the upstream keeps saying "not done",
// and when the gateway stops adding load to an upstream that is failing.
type Retry struct {
	// MaxExecutions is how many executions of one operation may end "not
	// done" (a status in retry_statuses, a 307 or 308 that releases, a
	// connection that failed before the request left) before the record
	// is held for an operator with reason "retries exhausted"; 1 to 1000.
	// The execution that uses up the budget answers with the upstream's
	// own response. Default 5.
	MaxExecutions *int `json:"max_executions,omitempty"`
	// Breaker, when set, stops forwarding new executions of the route
	// after that many consecutive "not done" or unknown outcomes.
	Breaker *Breaker `json:"breaker,omitempty"`
}

// Breaker is a route's circuit breaker, kept by each gateway for itself.
type Breaker struct {
	// Failures is how many consecutive "not done" or unknown outcomes on
	// the route open the breaker, 1 to 10000. Required.
	Failures int `json:"failures,omitempty"`
	// CoolDown is how long the breaker stays open, from its opening:
	// new executions get 503 with Retry-After (the seconds left) and are
	// not forwarded; replays are still served. Then one probe is let
	// through: a success closes the breaker, a failure opens it for a
	// full cool-down again. 1s to 24h. Required.
	CoolDown Duration `json:"cool_down,omitempty"`
}

// BreakerRule is a resolved breaker.
type BreakerRule struct {
	Failures int
	CoolDown time.Duration
}

// Header is one configured header: its canonical name and its value
// template (static text and {env.NAME} placeholders).
type Header struct {
	Name, Value string
}

// resolveRecovery fills in the recovery fields of res from the route and
// the defaults.
func resolveRecovery(res *Resolved, rt, def *Policy) {
	res.MaxExecutions = defaultMaxExecutions
	for _, r := range []*Retry{rt.Retry, def.Retry} {
		if r != nil && r.MaxExecutions != nil {
			res.MaxExecutions = *r.MaxExecutions
			break
		}
	}
	for _, r := range []*Retry{rt.Retry, def.Retry} {
		if r != nil && r.Breaker != nil {
			res.Breaker = &BreakerRule{Failures: r.Breaker.Failures, CoolDown: time.Duration(r.Breaker.CoolDown)}
			break
		}
	}
	res.Owner = cmp.Or(rt.Owner, def.Owner)
	res.KeepRequest = *cmp.Or(rt.KeepRequest, def.KeepRequest, new(bool))
	headers := rt.RedriveHeaders
	if headers == nil {
		headers = def.RedriveHeaders
	}
	for name, value := range headers {
		res.RedriveHeaders = append(res.RedriveHeaders, Header{Name: http.CanonicalHeaderKey(name), Value: value})
	}
	slices.SortFunc(res.RedriveHeaders, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	for _, name := range slices.Concat(def.KeepHeaders, rt.KeepHeaders) {
		if canon := http.CanonicalHeaderKey(strings.TrimSpace(name)); !slices.Contains(res.KeepHeaders, canon) {
			res.KeepHeaders = append(res.KeepHeaders, canon)
		}
	}
}

// recovery checks a policy's recovery fields; f is "defaults." or
// "routes[i].".
func (c *errorList) recovery(f string, p *Policy) {
	if r := p.Retry; r != nil {
		if m := r.MaxExecutions; m != nil && (*m < 1 || *m > maxMaxExecutions) {
			c.add(f+"retry.max_executions", "must be from 1 to %d, got %d", maxMaxExecutions, *m)
		}
		if b := r.Breaker; b != nil {
			if b.Failures < 1 || b.Failures > maxBreakerFailures {
				c.add(f+"retry.breaker.failures", "must be from 1 to %d, got %d (how many consecutive failures open the breaker)", maxBreakerFailures, b.Failures)
			}
			switch d := time.Duration(b.CoolDown); {
			case d == 0:
				c.add(f+"retry.breaker.cool_down", "is required, e.g. 30s: how long the breaker stays open")
			case d < minCoolDown || d > maxCoolDown:
				c.add(f+"retry.breaker.cool_down", "must be from %s to %s, got %s", minCoolDown, maxCoolDown, d)
			}
		}
	}
	switch o := p.Owner; {
	case o == "" && c.isWritten(f+"owner"):
		c.add(f+"owner", "must not be empty (leave it out to name no owner)")
	case len(o) > maxOwnerLen || strings.TrimSpace(o) != o || strings.ContainsFunc(o, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		c.add(f+"owner", "%s is not an owner: 1 to %d characters, no control characters or surrounding spaces", quote(o), maxOwnerLen)
	}
	c.headerTemplates(f+"redrive_headers.", p.RedriveHeaders, func(field, value string) {
		if err := keying.CheckEnvText(value); err != nil {
			c.add(field, "%v", err)
		}
	})
	c.keepHeaders(f+"keep_headers", p.KeepHeaders)
}

// keepHeaders checks keep_headers: each a valid header name, once
// whatever its case, neither the caller's credentials nor one the
// gateway sets itself (the caller's credentials are credentialHeaders).
func (c *errorList) keepHeaders(field string, names []string) {
	seen := make(map[string]int, len(names))
	for j, name := range names {
		canon := http.CanonicalHeaderKey(name)
		k, dup := seen[canon]
		seen[canon] = j
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			c.add(at(field, j), "%s is not a valid header name", quote(name))
		case dup:
			c.add(at(field, j), "%s is already named at [%d] (header names are case-insensitive)", quote(name), k)
		case credentialHeaders[canon] != "":
			c.add(at(field, j), "%s carries the caller's credentials, which are never kept: give a re-drive the gateway's own with redrive_headers", canon)
		case gatewayHeaders[canon] || strings.HasPrefix(canon, "Proxy-"):
			c.add(at(field, j), "%s is set by the gateway itself and is never kept", canon)
		}
	}
}
