// Package drill is `idemgate drill`: it runs the seed's test list (double
// delivery, parallel workers, a stop after the external action, an
// unavailable API, a wrong field, a restart) against a real API through a
// gateway of its own and a fault proxy of its own, and reports how many
// business records each operation produced and what state it ended in.
package drill

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keying"
)

// File is a drill file: what to drill and how to count its records.
type File struct {
	// Upstream is the base URL of the API under test (http or https,
	// scheme and host only; {env.NAME} allowed); the drill's fault proxy
	// forwards to it.
	Upstream string `json:"upstream,omitempty"`
	// Rules is the route rules file the drill's gateway runs with, the
	// same file production uses; relative to the drill file.
	Rules string `json:"rules,omitempty"`
	// Route names the route of Rules to drill.
	Route string `json:"route,omitempty"`
	// Request is one operation, as a template: {run} and {n} make every
	// operation new to the API; {env.NAME} fills in a credential.
	Request Request `json:"request,omitzero"`
	// Count, when set, says how to count the business records of one
	// operation; without it the drill counts the upstream's 2xx answers
	// through its own proxy.
	Count *Count `json:"count,omitempty"`
	// Redis, when set, drills a gateway on this Redis (redis:// or
	// rediss://; {env.NAME} for a password) instead of an embedded store
	// in a temporary directory.
	Redis string `json:"redis,omitempty"`
	// Scenarios are the scenarios to run; default all. They run in the
	// drill's order (scenarioNames), whatever the list's.
	Scenarios []string `json:"scenarios,omitempty"`
	// Parallel is how many identical requests the parallel scenario sends
	// at once, 2 to 100; default 10.
	Parallel int `json:"parallel,omitempty"`
	// Invalid is the request the API rejects, for invalid_field: required
	// when that scenario runs.
	Invalid *Mutation `json:"invalid,omitempty"`
	// Changed is the other payload of changed_payload; default: the JSON
	// body with a field drill_changed added.
	Changed *Mutation `json:"changed,omitempty"`
}

// Request is the template of one operation.
type Request struct {
	// Method is the request's method; default POST.
	Method string `json:"method,omitempty"`
	// Path is the request's path and query, from "/".
	Path string `json:"path,omitempty"`
	// Headers are sent with every request: static text, {run}, {n} and
	// {env.NAME}.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the request body: static text, {run}, {n} and {env.NAME}.
	Body string `json:"body,omitempty"`
}

// Count is how to count the business records of one operation.
type Count struct {
	// URL is a GET request (http or https) with {key}, the operation's
	// idempotency key, URL-escaped, and {env.NAME} (for its host: a
	// credential goes in a header).
	URL string `json:"url,omitempty"`
	// Headers are sent with it: static text and {env.NAME} only.
	Headers map[string]string `json:"headers,omitempty"`
	// Path is a JSON path (gjson) into its answer that gives the number
	// of records: "#" for an array's length, or a field.
	Path string `json:"path,omitempty"`
}

// Mutation is another payload for the same operation: fields set in a
// JSON body, or a whole body.
type Mutation struct {
	// Set gives JSON paths (sjson) and their values: a value that is JSON
	// ("-1", "true", "[]") is set as it is, other text as a string.
	Set map[string]string `json:"set,omitempty"`
	// Body replaces the body: static text, {run}, {n} and {env.NAME}.
	Body string `json:"body,omitempty"`
}

// Scenario names, in the order they run.
var scenarioNames = []string{
	"double_delivery", "three_deliveries", "parallel", "upstream_down",
	"invalid_field", "changed_payload", "lost_answer", "slow_upstream", "gateway_restart",
}

const (
	defaultParallel = 10
	maxParallel     = 100
)

// Load reads and validates a drill file. Its problems are a
// config.ErrorList naming file, line and field.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse decodes and validates a drill file; name is the file's name in
// errors and the directory Rules is relative to.
func Parse(name string, data []byte) (*File, error) {
	var f File
	doc := config.DecodeDocument(name, data, &f, "the drill file", "a mapping with upstream, rules, route and request")
	f.check(doc)
	if err := doc.Err(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(f.Rules) {
		f.Rules = filepath.Join(filepath.Dir(name), f.Rules)
	}
	if f.Request.Method == "" {
		f.Request.Method = http.MethodPost
	}
	if f.Parallel == 0 {
		f.Parallel = defaultParallel
	}
	if f.Scenarios == nil {
		f.Scenarios = scenarioNames
	}
	// They run in the drill's order, whatever the list's: the breaker
	// counts consecutive failures across them, and gateway_restart
	// restarts the gateway the others use.
	slices.SortFunc(f.Scenarios, func(a, b string) int {
		return slices.Index(scenarioNames, a) - slices.Index(scenarioNames, b)
	})
	return &f, nil
}

// placeholderRE finds the placeholders of a template.
var placeholderRE = regexp.MustCompile(`\{([A-Za-z][A-Za-z0-9_.-]*)\}`)

// check validates what decoded; problems go to doc.
func (f *File) check(doc *config.Document) {
	checkBase(doc, "upstream", f.Upstream, false)
	if f.Rules == "" {
		doc.Add("rules", "is required: the route rules file the gateway runs with")
	}
	if f.Route == "" {
		doc.Add("route", "is required: the name of the route to drill")
	}
	r := &f.Request
	switch {
	case !doc.Written("request"):
		doc.Add("request", "is required: one operation, with {run} and {n}")
	case r.Method != "" && !httpguts.ValidHeaderFieldName(r.Method):
		doc.Add("request.method", "%q is not an HTTP method", r.Method)
	case slices.Contains([]string{"GET", "HEAD", "OPTIONS", "TRACE"}, strings.ToUpper(r.Method)):
		doc.Add("request.method", "%s is never guarded: drill an operation that changes something", r.Method)
	}
	if doc.Written("request") {
		if !strings.HasPrefix(r.Path, "/") {
			doc.Add("request.path", "is required and starts with /")
		}
		checkTemplate(doc, "request.path", r.Path, "run", "n")
		checkTemplate(doc, "request.body", r.Body, "run", "n", "env")
		checkHeaders(doc, "request.headers", r.Headers, "run", "n", "env")
		all := r.Path + r.Body
		for _, v := range r.Headers {
			all += v
		}
		if !strings.Contains(all, "{run}") || !strings.Contains(all, "{n}") {
			doc.Add("request", "must use {run} and {n} (in the path, a header or the body), so that every operation is new to the API")
		}
	}
	if c := f.Count; c != nil {
		checkBase(doc, "count.url", c.URL, true)
		if !strings.Contains(c.URL, "{key}") {
			doc.Add("count.url", "must hold {key}, the operation's idempotency key")
		}
		checkHeaders(doc, "count.headers", c.Headers, "env")
		if strings.TrimSpace(c.Path) == "" {
			doc.Add("count.path", `is required: a JSON path to the number of records ("#" for an array's length)`)
		}
	}
	if f.Redis != "" {
		if u, err := url.Parse(keying.ExpandEnv(f.Redis)); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			doc.Add("redis", "must be a redis:// or rediss:// URL")
		}
	}
	seen := map[string]bool{}
	for i, s := range f.Scenarios {
		field := fmt.Sprintf("scenarios[%d]", i)
		switch {
		case !slices.Contains(scenarioNames, s):
			doc.Add(field, "unknown scenario %q; the scenarios are %s", s, strings.Join(scenarioNames, ", "))
		case seen[s]:
			doc.Add(field, "%s is listed twice", s)
		}
		seen[s] = true
	}
	if doc.Written("scenarios") && len(f.Scenarios) == 0 {
		doc.Add("scenarios", "lists no scenario (leave it out to run them all)")
	}
	if f.Parallel != 0 && (f.Parallel < 2 || f.Parallel > maxParallel) {
		doc.Add("parallel", "must be 2 to %d, not %d", maxParallel, f.Parallel)
	}
	runsInvalid := f.Scenarios == nil || seen["invalid_field"]
	if f.Invalid == nil && runsInvalid && !doc.Failed() {
		doc.Add("invalid", "is required for the invalid_field scenario: a field the API rejects (set) or a body (body); or leave invalid_field out of scenarios")
	}
	checkMutation(doc, "invalid", f.Invalid)
	checkMutation(doc, "changed", f.Changed)
}

// checkBase checks an absolute http(s) URL with no credentials in it;
// base URLs (upstream) take no path, query or fragment.
func checkBase(doc *config.Document, field, s string, withPath bool) {
	if s == "" {
		doc.Add(field, "is required: an http:// or https:// URL")
		return
	}
	if withPath {
		checkTemplate(doc, field, s, "key", "env")
	} else {
		checkTemplate(doc, field, s, "env")
	}
	u, err := url.Parse(keying.ExpandEnv(strings.ReplaceAll(s, "{key}", "k")))
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		msg := "%q is not an http:// or https:// URL"
		if strings.Contains(s, "{env.") {
			msg += " once its {env.NAME} are filled in (is the variable set?)"
		}
		doc.Add(field, msg, s)
	case u.User != nil:
		doc.Add(field, "must not hold credentials: send them in headers with {env.NAME}")
	case !withPath && (strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != ""):
		doc.Add(field, "is the API's base URL (scheme and host): the path goes in request.path")
	}
}

// checkTemplate checks that s has no placeholders but those named.
func checkTemplate(doc *config.Document, field, s string, allowed ...string) {
	for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
		name, _, _ := strings.Cut(m[1], ".")
		if !slices.Contains(allowed, name) || (name == "env" && !strings.HasPrefix(m[1], "env.")) || (name != "env" && name != m[1]) {
			doc.Add(field, "placeholder {%s}: %s takes %s", m[1], field, placeholderList(allowed))
			return
		}
	}
}

func placeholderList(allowed []string) string {
	out := make([]string, len(allowed))
	for i, a := range allowed {
		out[i] = "{" + a + "}"
		if a == "env" {
			out[i] = "{env.NAME}"
		}
	}
	return strings.Join(out, ", ")
}

func checkHeaders(doc *config.Document, field string, h map[string]string, allowed ...string) {
	for name, v := range h {
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			doc.Add(field, "%q is not a header name", name)
		case strings.ContainsAny(v, "\r\n\x00"):
			doc.Add(field+"."+name, "has a line break")
		default:
			checkTemplate(doc, field+"."+name, v, allowed...)
		}
	}
}

func checkMutation(doc *config.Document, field string, m *Mutation) {
	switch {
	case m == nil:
	case len(m.Set) == 0 && m.Body == "":
		doc.Add(field, "needs set (JSON fields to change) or body")
	case len(m.Set) > 0 && m.Body != "":
		doc.Add(field, "takes set or body, not both")
	case m.Body != "":
		checkTemplate(doc, field+".body", m.Body, "run", "n", "env")
	}
	if m != nil {
		for path := range m.Set {
			if path == "" || strings.ContainsAny(path, "#*?|@") {
				doc.Add(field+".set", "%q is not a plain JSON path", path)
			}
		}
	}
}
