package config

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"regexp"
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
	maxVerifyURL      = 2048
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
// A check whose status is in found.status and whose JSON body has a
// non-empty value at found.id means applied: the record is completed with
// the lookup's answer, which retries replay. A status in not_found.status,
// or a found status with nothing at found.id, means not applied:
// not_found_checks such answers in a row, `every` apart, release the
// record and the next retry executes. Anything else leaves it held.
type Verify struct {
	// URL is the lookup, an absolute http or https URL template:
	// "{env.CRM_URL}/crm/deals?source_key={key}". Placeholders: {key} (the
	// derived key), {key_id} (the record id), {header.NAME},
	// {query.NAME}, {form.NAME} and {body.PATH} of the request, each
	// URL-escaped, and {env.NAME}, filled in as it is from the
	// environment of the gateway that runs the check. Required.
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
}

// VerifyNotFound is what an operation that did not take effect looks like.
type VerifyNotFound struct {
	// Status lists the lookup statuses that mean not applied.
	// Default [404].
	Status []int `json:"status,omitempty"`
}

// VerifyRule is a route's verify rule with every field filled in.
type VerifyRule struct {
	URL            URLTemplate
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
	ReplayStatus   int // 0: the lookup's status
}

// VerifyHeader is one header a check sends: its canonical name and its
// value template (static text and {env.NAME}; see ExpandEnv).
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
	u, _ := ParseURLTemplate(v.URL) // validated
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

	if v.URL == "" {
		c.add(f("url"), "is required, e.g. \"{env.CRM_URL}/crm/deals?source_key={key}\"")
	} else if _, err := ParseURLTemplate(v.URL); err != nil {
		c.add(f("url"), "%v", err)
	}
	if v.Method != "" && !httpguts.ValidHeaderFieldName(v.Method) {
		c.add(f("method"), "%s is not an HTTP method", quote(v.Method))
	}
	seen := make(map[string]string, len(v.Headers))
	for _, name := range slices.Sorted(maps.Keys(v.Headers)) {
		field := f("headers." + name)
		canon := http.CanonicalHeaderKey(name)
		other, dup := seen[canon]
		seen[canon] = name
		switch {
		case dup:
			c.add(field, "is the same header as %s (header names are case-insensitive)", quote(other))
		case !httpguts.ValidHeaderFieldName(name):
			c.add(field, "%s is not a valid header name", quote(name))
		case verifyReservedHeaders[canon]:
			c.add(field, "%s is set by the gateway itself and may not be configured", canon)
		default:
			if err := checkEnvText(v.Headers[name]); err != nil {
				c.add(field, "%v", err)
			}
		}
	}
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

// verifyReservedHeaders are set by the HTTP client for every check.
var verifyReservedHeaders = map[string]bool{
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

// URLTemplate is a verify URL template: literal text and placeholders.
// It is immutable and safe for concurrent use.
type URLTemplate struct {
	src   string
	parts []urlPart
}

type urlKind uint8

const (
	urlLiteral urlKind = iota // text, and {env.NAME}: kept as written, filled in when the check runs
	urlKey                    // {key}
	urlKeyID                  // {key_id}
	urlRequest                // {header.*}, {query.*}, {form.*}, {body.*}
)

type urlPart struct {
	kind urlKind
	text string // the literal text
	ph   keying.Placeholder
}

var (
	// placeholderRE matches a placeholder: a '{' up to the next '}'.
	placeholderRE = regexp.MustCompile(`\{([^}]*)\}`)
	envRE         = regexp.MustCompile(`\{env\.([A-Za-z_][A-Za-z0-9_]*)\}`)
	// validEnvName reports whether s is an environment variable name:
	// letters, digits and '_', not starting with a digit.
	validEnvName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString
)

// ParseURLTemplate parses a verify URL template: an absolute http or
// https URL (or one that starts with an {env.NAME} placeholder holding
// its base), at most 2048 bytes of visible ASCII, with {key}, {key_id},
// {env.NAME} and request placeholders.
func ParseURLTemplate(s string) (URLTemplate, error) {
	t := URLTemplate{src: s}
	if len(s) > maxVerifyURL {
		return t, fmt.Errorf("is longer than %d bytes", maxVerifyURL)
	}
	lit := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '{':
			end := strings.IndexAny(s[i+1:], "{}")
			if end < 0 || s[i+1+end] == '{' {
				return t, fmt.Errorf("%s: unbalanced '{' at offset %d", quote(s), i)
			}
			name := s[i+1 : i+1+end]
			p, err := parseURLPlaceholder(name)
			if err != nil {
				return t, fmt.Errorf("%s: placeholder {%s}: %v", quote(s), name, err)
			}
			t.parts = append(t.parts, urlPart{text: s[lit:i]}, p)
			i += 1 + end
			lit = i + 1
		case c == '}':
			return t, fmt.Errorf("%s: unbalanced '}' at offset %d", quote(s), i)
		case c < 0x21 || c > 0x7e:
			return t, fmt.Errorf("%s: byte 0x%02x at offset %d (a URL is visible ASCII; escape it)", quote(s), c, i)
		}
	}
	t.parts = append(t.parts, urlPart{text: s[lit:]})
	if strings.HasPrefix(s, "{env.") {
		return t, nil // the base comes from the environment
	}
	// With every placeholder standing for a plain value, the template
	// must be an absolute http(s) URL with a host.
	u, err := url.Parse(placeholderRE.ReplaceAllString(s, "x"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return t, fmt.Errorf("%s is not an absolute http or https URL (or one whose base is an {env.NAME} placeholder)", quote(s))
	}
	return t, nil
}

func parseURLPlaceholder(name string) (urlPart, error) {
	switch env, isEnv := strings.CutPrefix(name, "env."); {
	case name == "key":
		return urlPart{kind: urlKey}, nil
	case name == "key_id":
		return urlPart{kind: urlKeyID}, nil
	case isEnv && !validEnvName(env):
		return urlPart{}, fmt.Errorf("%s is not an environment variable name", quote(env))
	case isEnv:
		return urlPart{text: "{" + name + "}"}, nil
	}
	ph, err := keying.ParsePlaceholder(name)
	if err != nil {
		return urlPart{}, fmt.Errorf("%v (or {key}, {key_id}, {env.NAME})", err)
	}
	return urlPart{kind: urlRequest, ph: ph}, nil
}

// String returns the template as written.
func (t URLTemplate) String() string { return t.src }

// IsZero reports whether t is the zero template.
func (t URLTemplate) IsZero() bool { return t.src == "" }

// Resolve fills in the request's placeholders: {key}, {key_id} and the
// request values, each URL-escaped (every byte but A-Z a-z 0-9 - . _ ~
// becomes %XX), so a value can neither end its query parameter nor its
// path segment. {env.NAME} placeholders stay as written, for ExpandEnv
// when the check runs. ok is false when a request placeholder is empty:
// a lookup for "" would find the wrong thing.
func (t URLTemplate) Resolve(key, keyID string, in *keying.Input) (resolved string, ok bool, err error) {
	var b strings.Builder
	for _, p := range t.parts {
		var v string
		switch p.kind {
		case urlLiteral:
			b.WriteString(p.text)
			continue
		case urlKey:
			v = key
		case urlKeyID:
			v = keyID
		case urlRequest:
			if v, err = p.ph.Value(in); err != nil {
				return "", false, err
			}
		}
		if v == "" {
			return "", false, nil
		}
		b.WriteString(strings.ReplaceAll(url.QueryEscape(v), "+", "%20"))
	}
	return b.String(), true, nil
}

// ExpandEnv replaces the {env.NAME} placeholders in s by the values of
// the environment variables, as they are ("" for one that is not set).
// Other text, braces included, stays.
func ExpandEnv(s string) string {
	return envRE.ReplaceAllStringFunc(s, func(p string) string { return os.Getenv(p[len("{env.") : len(p)-1]) })
}

// checkEnvText checks a header value template: text without control
// characters, whose only placeholders are {env.NAME}.
func checkEnvText(s string) error {
	if i := strings.IndexFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }); i >= 0 {
		return fmt.Errorf("has a control character at offset %d", i)
	}
	for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
		if env, ok := strings.CutPrefix(m[1], "env."); !ok || !validEnvName(env) {
			return fmt.Errorf("placeholder {%s}: headers take static text and {env.NAME} only (they are filled in when the check runs, and never stored)", m[1])
		}
	}
	if strings.Contains(placeholderRE.ReplaceAllString(s, ""), "{") {
		return fmt.Errorf("%s: unbalanced '{'", quote(s))
	}
	return nil
}
