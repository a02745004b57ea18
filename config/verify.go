package config

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/keying"
)

// Built-in defaults of a verify rule.
const (
	defaultVerifyMethod         = http.MethodGet
	defaultVerifyTimeout        = 2 * time.Second
	defaultVerifyAfter          = 2 * time.Second
	defaultVerifyEvery          = 10 * time.Second
	defaultVerifyAttempts       = 5
	defaultVerifyNotFoundChecks = 2

	maxVerifyTimeout  = time.Minute
	maxVerifyAttempts = 100
	maxNotFoundChecks = 20
)

var (
	defaultFoundStatus    = []int{http.StatusOK}
	defaultNotFoundStatus = []int{http.StatusNotFound}
)

// Verify says how to find out, by the request's key, whether an operation
// whose outcome is unknown took effect (a 5xx, a timeout or reset after
// the request was sent, a gateway that died mid-call), instead of holding
// it for an operator blindly. The gateway asks the upstream with the
// check this rule resolves from the request (kept on the record, without
// its headers) `after` the ambiguity, then every `every`, up to
// `attempts` times, and once more whenever a retry finds the record held.
//
// A check whose status is in found.status, whose JSON body has a
// non-empty value at found.id, and whose found.match paths all equal
// their templates means applied: the record is completed with the value
// at found.object (default: the whole answer), which retries replay. A
// status in not_found.status, or a found status with nothing at
// found.id, means not applied: not_found_checks such answers in a row,
// `every` apart, release the record and the next retry executes.
// Anything else leaves it held, including an answer about another key (a
// match path that differs) and a top-level array of more than one
// element (a lookup that ignored its filter).
//
// Neither the URL nor the headers may copy the caller's credentials
// (their Authorization, Proxy-Authorization or Cookie headers, a cookie,
// anything the route's scope uses, a header, parameter or field whose
// name says it is a credential): the resolved URL is stored on the record
// and shown to operators. The lookup brings its own, in headers, from
// {env.NAME}.
type Verify struct {
	// URL is the lookup, an absolute http or https URL template:
	// "{env.CRM_URL}/crm/deals?source_key={key}". Placeholders: {key} (the
	// derived key), {record_id} (the record id), {header.NAME},
	// {query.NAME}, {form.NAME} and {body.PATH} of the request, each
	// URL-escaped, and {env.NAME}, filled in as it is from the
	// environment of the gateway that runs the check. The scheme,
	// userinfo, host and port are static text or {env.NAME}: a request
	// placeholder there would send the lookup, with its headers'
	// credentials, where a caller says. That, and placeholders that copy
	// the caller's credentials, are config errors. Required.
	URL string `json:"url,omitempty"`
	// Method is the lookup's method. Default GET.
	Method string `json:"method,omitempty"`
	// Headers are sent with every check: static text and {env.NAME}
	// placeholders (such as "Bearer {env.CRM_TOKEN}"), filled in when the
	// check runs from the route's config, never stored on a record and
	// never logged.
	Headers map[string]string `json:"headers,omitempty"`
	// Timeout bounds each check, at most 1m. Default 2s.
	Timeout Duration `json:"timeout,omitempty"`
	// Found is what an applied operation looks like.
	Found VerifyFound `json:"found,omitzero"`
	// NotFound is what an operation that did not take effect looks like.
	NotFound VerifyNotFound `json:"not_found,omitzero"`
	// After is how long after the ambiguity the first check runs.
	// Default 2s.
	After Duration `json:"after,omitempty"`
	// Every is the time between scheduled checks, and the least time
	// between two "not applied" answers that both count. Default 10s.
	Every Duration `json:"every,omitempty"`
	// Attempts is how many scheduled checks run, 0 to 100 (0: only
	// retries and operators check). Default 5.
	Attempts *int `json:"attempts,omitempty"`
	// NotFoundChecks is how many "not applied" answers in a row, `every`
	// apart, release the record, 1 to 20. Default 2: one "not found"
	// never releases, since the first call may still be running upstream.
	NotFoundChecks *int `json:"not_found_checks,omitempty"`
	// ReplayStatus, when set, is the status retries get for an operation
	// the lookup found (a 201 for a creation looked up with a 200).
	// Default: the lookup's status.
	ReplayStatus int `json:"replay_status,omitempty"`
}

// VerifyFound is what an applied operation looks like.
type VerifyFound struct {
	// Status lists the lookup statuses that may mean applied. Default [200].
	Status []int `json:"status,omitempty"`
	// ID is a JSON path (gjson syntax) into the lookup's body; a
	// non-empty value there means applied and is recorded as the
	// external id ("0.id" for the first element of a JSON array).
	// Required.
	ID string `json:"id,omitempty"`
	// Object is a JSON path (gjson syntax) into the lookup's body to the
	// value a retry replays, such as "0" for the first element of a
	// search result, so that retries get the object as the operation's
	// own endpoint answers it. An answer with nothing there is
	// inconclusive. Default: the whole answer.
	Object string `json:"object,omitempty"`
	// Match maps JSON paths (gjson syntax) in the lookup's body to
	// templates their values must equal, as text: {key}, {record_id},
	// request placeholders and literal text, such as
	// {"0.source_key": "{key}"}. An answer whose value at a path differs
	// or is missing is about another operation: inconclusive, never
	// applied. The resolved values are kept on the record with the check.
	Match map[string]string `json:"match,omitempty"`
}

// VerifyNotFound is what an operation that did not take effect looks like.
type VerifyNotFound struct {
	// Status lists the lookup statuses that mean not applied.
	// Default [404].
	Status []int `json:"status,omitempty"`
}

// VerifyRule is a route's verify rule with every field filled in.
type VerifyRule struct {
	URL            keying.URLTemplate
	Method         string // upper case
	Headers        []VerifyHeader
	Timeout        time.Duration
	After          time.Duration
	Every          time.Duration
	Attempts       int
	NotFoundChecks int
	FoundStatus    []int
	FoundID        string
	NotFoundStatus []int
	ReplayStatus   int           // 0: the lookup's status
	FoundObject    string        // "": the whole answer
	FoundMatch     []VerifyMatch // sorted by path; nil for none
}

// VerifyMatch is one path of found.match and the template its value
// must equal.
type VerifyMatch struct {
	Path  string
	Value keying.URLTemplate // a match template (keying.ParseMatchTemplate)
}

// VerifyHeader is one header a check sends: its canonical name and its
// value template (static text and {env.NAME}; see keying.ExpandEnv).
type VerifyHeader struct {
	Name  string
	Value string
}

// Found reports whether status may mean applied.
func (v *VerifyRule) Found(status int) bool { return slices.Contains(v.FoundStatus, status) }

// NotFound reports whether status means not applied.
func (v *VerifyRule) NotFound(status int) bool { return slices.Contains(v.NotFoundStatus, status) }

func resolveVerify(v *Verify) *VerifyRule {
	if v == nil {
		return nil
	}
	u, _ := keying.ParseURLTemplate(v.URL) // validated
	rule := &VerifyRule{
		URL:            u,
		Method:         strings.ToUpper(cmp.Or(v.Method, defaultVerifyMethod)),
		Timeout:        time.Duration(cmp.Or(v.Timeout, Duration(defaultVerifyTimeout))),
		After:          time.Duration(cmp.Or(v.After, Duration(defaultVerifyAfter))),
		Every:          time.Duration(cmp.Or(v.Every, Duration(defaultVerifyEvery))),
		Attempts:       *cmp.Or(v.Attempts, new(defaultVerifyAttempts)),
		NotFoundChecks: *cmp.Or(v.NotFoundChecks, new(defaultVerifyNotFoundChecks)),
		FoundStatus:    slices.Clone(firstSlice(v.Found.Status, defaultFoundStatus)),
		FoundID:        v.Found.ID,
		NotFoundStatus: slices.Clone(firstSlice(v.NotFound.Status, defaultNotFoundStatus)),
		ReplayStatus:   v.ReplayStatus,
		FoundObject:    v.Found.Object,
	}
	for _, path := range slices.Sorted(maps.Keys(v.Found.Match)) {
		t, _ := keying.ParseMatchTemplate(v.Found.Match[path]) // validated
		rule.FoundMatch = append(rule.FoundMatch, VerifyMatch{Path: path, Value: t})
	}
	for name, value := range v.Headers {
		rule.Headers = append(rule.Headers, VerifyHeader{Name: http.CanonicalHeaderKey(name), Value: value})
	}
	slices.SortFunc(rule.Headers, func(a, b VerifyHeader) int { return strings.Compare(a.Name, b.Name) })
	return rule
}

// checkVerify checks route i's verify rule against the route and the
// rules' defaults.
func checkVerify(c *errorList, i int, rt *Route, def *Policy) {
	v := rt.Verify
	if v == nil {
		return
	}
	route := "routes[" + strconv.Itoa(i) + "]."
	f := func(field string) string { return route + "verify." + field }
	switch {
	case rt.OnUnknownOutcome == OnUnknownRelease:
		c.add(route+"verify", "needs on_unknown_outcome hold or store (the route says release): under release nothing is held to verify")
	case rt.OnUnknownOutcome == "" && def.OnUnknownOutcome == OnUnknownRelease:
		c.add(route+"verify", "needs on_unknown_outcome hold or store (the route inherits release from defaults.on_unknown_outcome): under release nothing is held to verify")
	}

	creds := newCallerCredentials(firstSlice(rt.Scope, def.Scope, []string{defaultScope}))
	if v.URL == "" {
		c.add(f("url"), "is required, e.g. \"{env.CRM_URL}/crm/deals?source_key={key}\"")
	} else if leaks := creds.in(v.URL); len(leaks) > 0 {
		for _, l := range leaks {
			c.add(f("url"), "placeholder {%s} copies the caller's credentials (%s), and the resolved URL is stored on the record and shown to operators: give the lookup its own in verify.headers with {env.NAME}", l.name, l.why)
		}
	} else if _, err := keying.ParseURLTemplate(v.URL); err != nil {
		c.add(f("url"), "%v", err)
	}
	if v.Method != "" && !httpguts.ValidHeaderFieldName(v.Method) {
		c.add(f("method"), "%s is not an HTTP method", quote(v.Method))
	}
	c.headerTemplates(f("headers."), v.Headers, func(field, value string) {
		if leaks := creds.in(value); len(leaks) > 0 {
			c.add(field, "placeholder {%s} copies the caller's credentials: headers take static text and {env.NAME} only (they are filled in when the check runs, and never stored)", leaks[0].name)
		} else if err := keying.CheckEnvText(value); err != nil {
			c.add(field, "%v", err)
		}
	})
	c.duration(f("timeout"), v.Timeout, 0)
	if time.Duration(v.Timeout) > maxVerifyTimeout {
		c.add(f("timeout"), "must be at most %s, got %s: a retry waits for its check", maxVerifyTimeout, v.Timeout)
	}
	c.duration(f("after"), v.After, 0)
	c.duration(f("every"), v.Every, 0)
	if v.Attempts != nil && (*v.Attempts < 0 || *v.Attempts > maxVerifyAttempts) {
		c.add(f("attempts"), "must be from 0 to %d, got %d", maxVerifyAttempts, *v.Attempts)
	}
	if v.NotFoundChecks != nil && (*v.NotFoundChecks < 1 || *v.NotFoundChecks > maxNotFoundChecks) {
		c.add(f("not_found_checks"), "must be from 1 to %d, got %d", maxNotFoundChecks, *v.NotFoundChecks)
	}
	if v.Found.ID == "" {
		c.add(f("found.id"), "is required: the JSON path of the external id in the lookup's answer, e.g. \"0.id\"")
	} else if strings.TrimSpace(v.Found.ID) == "" {
		c.add(f("found.id"), "must not be an empty path")
	}
	if v.Found.Object != "" && strings.TrimSpace(v.Found.Object) == "" {
		c.add(f("found.object"), "must not be an empty path (leave it out to replay the whole answer)")
	}
	if v.Found.Match != nil && len(v.Found.Match) == 0 {
		c.add(f("found.match"), "must not be empty (leave it out to match nothing)")
	}
	for _, path := range slices.Sorted(maps.Keys(v.Found.Match)) {
		field, tmpl := f("found.match."+path), v.Found.Match[path]
		switch leaks := creds.in(tmpl); {
		case strings.TrimSpace(path) == "":
			c.add(f("found.match"), "%s: a path must not be empty", quote(path))
		case tmpl == "":
			c.add(field, "must not be empty: a template such as \"{key}\"")
		case len(leaks) > 0:
			for _, l := range leaks {
				c.add(field, "placeholder {%s} copies the caller's credentials (%s), and the resolved value is stored on the record and shown to operators", l.name, l.why)
			}
		default:
			if _, err := keying.ParseMatchTemplate(tmpl); err != nil {
				c.add(field, "%v", err)
			}
		}
	}
	c.statuses(f("found.status"), v.Found.Status)
	c.statuses(f("not_found.status"), v.NotFound.Status)
	found := firstSlice(v.Found.Status, defaultFoundStatus)
	for j, s := range v.NotFound.Status {
		if slices.Contains(found, s) {
			c.add(at(f("not_found.status"), j), "%d is also a found status: a found status with nothing at found.id already means not found", s)
		}
	}
	if v.NotFound.Status == nil && slices.Contains(found, http.StatusNotFound) {
		c.add(f("found.status"), "lists 404, which is the default not_found status: set not_found.status too")
	}
	if s := v.ReplayStatus; s != 0 && (s < 200 || s > 599) {
		c.add(f("replay_status"), "%d is not a final HTTP status (200 to 599)", s)
	}
}

// headerTemplates checks a mapping of header names to value templates
// (verify.headers, redrive_headers) whose fields start with prefix: each
// name valid, set once whatever its case, and not one the gateway sets
// itself; value checks each value.
func (c *errorList) headerTemplates(prefix string, headers map[string]string, value func(field, value string)) {
	seen := make(map[string]string, len(headers))
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		field := prefix + name
		canon := http.CanonicalHeaderKey(name)
		other, dup := seen[canon]
		seen[canon] = name
		switch {
		case dup:
			c.add(field, "is the same header as %s (header names are case-insensitive)", quote(other))
		case !httpguts.ValidHeaderFieldName(name):
			c.add(field, "%s is not a valid header name", quote(name))
		case gatewayHeaders[canon]:
			c.add(field, "%s is set by the gateway itself and may not be configured", canon)
		default:
			value(field, headers[name])
		}
	}
}

// gatewayHeaders are set by the gateway's HTTP client (for every check
// and every re-drive): hop-by-hop headers, Host and the body's framing.
var gatewayHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Te": true, "Trailer": true, "Upgrade": true, "Proxy-Connection": true,
}

func (c *errorList) statuses(field string, statuses []int) {
	if statuses != nil && len(statuses) == 0 {
		c.add(field, "must not be empty (leave it out for the default)")
	}
	for j, s := range statuses {
		if s < 100 || s > 599 {
			c.add(at(field, j), "%d is not an HTTP status (100 to 599)", s)
		}
	}
}
