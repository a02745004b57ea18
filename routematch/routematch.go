// Package routematch finds the route that guards a request: the first
// whose methods and path pattern match the normalised request, so that
// every request the upstream treats as the guarded endpoint is guarded.
package routematch

import (
	"fmt"
	"net/http"
	"path"
	"strings"
)

// Rule is what one route matches: its methods (upper case) and a path
// pattern in the syntax of Caddy's path matcher.
type Rule struct {
	Methods []string
	Path    string
}

// Table is a handler's routes' rules, compiled, in order.
type Table struct {
	routes []compiled
}

type compiled struct {
	methods map[string]bool
	path    pattern
}

// Error is a rule whose path pattern does not compile.
type Error struct {
	Index int    // the rule's place in New's rules
	Path  string // its pattern
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("path %q: %v", e.Path, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// New compiles rules; an error is an *Error.
func New(rules []Rule) (*Table, error) {
	t := &Table{routes: make([]compiled, len(rules))}
	for i, r := range rules {
		c := compiled{methods: make(map[string]bool, len(r.Methods))}
		for _, m := range r.Methods {
			c.methods[strings.ToUpper(m)] = true
		}
		var err error
		if c.path, err = compile(r.Path); err != nil {
			return nil, &Error{Index: i, Path: r.Path, Err: err}
		}
		t.routes[i] = c
	}
	return t, nil
}

// Match returns the index of the first route guarding r, or -1, and the
// request target its path pattern matched (see pattern.match). Methods
// match in any case (`post` is POST), the path as Normalise gives it.
// Safe methods are never guarded.
func (t *Table) Match(r *http.Request) (int, string) {
	method := strings.ToUpper(r.Method) // no copy when already upper case
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return -1, ""
	}
	p := Normalise(r.URL.Path)
	for i := range t.routes {
		c := &t.routes[i]
		if !c.methods[method] {
			continue
		}
		if target, ok := c.path.match(p); ok {
			return i, target
		}
	}
	return -1, ""
}

// Normalise is the path a route pattern is matched against: the
// decoded request path in lower case (as Caddy's path matcher compares),
// with `;parameters` removed from every segment (Tomcat and Spring route
// /deals;jsessionid=1 as /deals), cleaned as Caddy cleans it (doubled
// slashes merged, dot segments resolved) and without a trailing slash
// (Express and many routers route /deals/ as /deals). Percent-encoded
// characters are decoded before it sees the path (URL.Path), so /%64eals
// is /deals. A path that needs none of this is returned as it is, without
// allocating.
func Normalise(p string) string {
	if p == "" {
		return "/"
	}
	if isNormal(p) {
		return p
	}
	p = strings.ToLower(p)
	if strings.IndexByte(p, ';') >= 0 {
		var b strings.Builder
		b.Grow(len(p))
		for i, seg := range strings.Split(p, "/") {
			if i > 0 {
				b.WriteByte('/')
			}
			seg, _, _ = strings.Cut(seg, ";")
			b.WriteString(seg)
		}
		p = b.String()
	}
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	return path.Clean(p) // also drops a trailing slash
}

// isNormal reports whether Normalise would return p unchanged.
func isNormal(p string) bool {
	if p[0] != '/' || (len(p) > 1 && p[len(p)-1] == '/') {
		return false
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c >= 'A' && c <= 'Z', c >= 0x80, c == ';':
			return false
		case c == '/' && i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.'):
			return false
		}
	}
	return true
}

// patternKind is how a path pattern matches, as in Caddy's path matcher.
type patternKind uint8

const (
	patternExact     patternKind = iota // no wildcard
	patternPrefix                       // "/orders/*": one '*', at the end
	patternSuffix                       // "*/refund": one '*', at the start
	patternSubstring                    // "*/refund*": a '*' at each end only
	patternGlob                         // any other: path.Match, '*' within a segment
)

// pattern is a route's path pattern, compiled for normalised paths.
type pattern struct {
	kind    patternKind
	pattern string // lower case, without a trailing slash (but "/" and "/*")
	literal string // the pattern without its wildcards (prefix, suffix, substring)
	globSeg []bool // glob: which segments hold wildcards
}

// compile compiles a pattern in the syntax of Caddy's path matcher.
// It is matched case-insensitively against Normalise's paths, so its
// own trailing slash is ignored too ("/crm/deals/" is "/crm/deals").
func compile(src string) (pattern, error) {
	p := strings.ToLower(src)
	if len(p) > 1 && strings.HasSuffix(p, "/") && !strings.HasSuffix(p, "*/") {
		p = strings.TrimRight(p, "/")
	}
	pp := pattern{pattern: p}
	stars := strings.Count(p, "*")
	switch {
	case !strings.ContainsAny(p, "*?["):
		pp.kind = patternExact
	case stars == 2 && p[0] == '*' && p[len(p)-1] == '*' && len(p) > 1:
		pp.kind, pp.literal = patternSubstring, p[1:len(p)-1]
	case stars == 1 && p[len(p)-1] == '*' && !strings.ContainsAny(p, "?["):
		pp.kind, pp.literal = patternPrefix, p[:len(p)-1]
	case stars == 1 && p[0] == '*' && !strings.ContainsAny(p, "?["):
		pp.kind, pp.literal = patternSuffix, p[1:]
	default:
		if _, err := path.Match(p, ""); err != nil {
			return pattern{}, err
		}
		pp.kind = patternGlob
		for seg := range strings.SplitSeq(p, "/") {
			pp.globSeg = append(pp.globSeg, strings.ContainsAny(seg, "*?["))
		}
	}
	return pp, nil
}

// match reports whether the normalised path p matches, and returns the
// request target: what the wildcards matched (the whole segments that hold
// a wildcard, for a glob), "" for an exact pattern. The target is part of
// the request's fingerprint, while the literal parts are not: two routes
// that share an operation under different literal paths share records.
func (pp *pattern) match(p string) (target string, ok bool) {
	switch pp.kind {
	case patternExact:
		return "", p == pp.pattern
	case patternPrefix:
		if strings.HasPrefix(p, pp.literal) {
			return p[len(pp.literal):], true
		}
		// "/crm/deals/*" also covers "/crm/deals/" (normalised to
		// "/crm/deals"), as Caddy's matcher does.
		if p+"/" == pp.literal {
			return "", true
		}
	case patternSuffix:
		if strings.HasSuffix(p, pp.literal) {
			return p[:len(p)-len(pp.literal)], true
		}
	case patternSubstring:
		if i := strings.Index(p, pp.literal); i >= 0 {
			return p[:i] + "\x00" + p[i+len(pp.literal):], true
		}
	case patternGlob:
		if ok, _ := path.Match(pp.pattern, p); !ok {
			return "", false
		}
		var b strings.Builder
		i := 0
		for seg := range strings.SplitSeq(p, "/") {
			if i < len(pp.globSeg) && pp.globSeg[i] {
				b.WriteString(seg)
				b.WriteByte('/')
			}
			i++
		}
		return b.String(), true
	}
	return "", false
}
