package caddymodule

import (
	"net/http"
	"path"
	"strings"
)

// match returns the first route guarding r, or nil, and the request target
// its path pattern matched (see pathPattern.match). A route matches the
// normalised request, so that every request the upstream treats as the
// guarded endpoint is guarded: methods in any case (`post` is POST), and
// the path as normalisePath gives it. Safe methods are never guarded.
func (h *Handler) match(r *http.Request) (*route, string) {
	method := strings.ToUpper(r.Method) // no copy when already upper case
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return nil, ""
	}
	p := normalisePath(r.URL.Path)
	for _, rt := range h.routes {
		if !rt.methods[method] {
			continue
		}
		if target, ok := rt.path.match(p); ok {
			return rt, target
		}
	}
	return nil, ""
}

// normalisePath is the path a route pattern is matched against: the
// decoded request path in lower case (as Caddy's path matcher compares),
// with `;parameters` removed from every segment (Tomcat and Spring route
// /deals;jsessionid=1 as /deals), cleaned as Caddy cleans it (doubled
// slashes merged, dot segments resolved) and without a trailing slash
// (Express and many routers route /deals/ as /deals). Percent-encoded
// characters are decoded before it sees the path (URL.Path), so /%64eals
// is /deals. A path that needs none of this is returned as it is, without
// allocating.
func normalisePath(p string) string {
	if p == "" {
		return "/"
	}
	if isNormalPath(p) {
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

// isNormalPath reports whether normalisePath would return p unchanged.
func isNormalPath(p string) bool {
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

// pathPattern is a route's path pattern, compiled for normalised paths.
type pathPattern struct {
	kind    patternKind
	pattern string // lower case, without a trailing slash (but "/" and "/*")
	literal string // the pattern without its wildcards (prefix, suffix, substring)
	globSeg []bool // glob: which segments hold wildcards
}

// compilePath compiles a pattern in the syntax of Caddy's path matcher.
// It is matched case-insensitively against normalisePath's paths, so its
// own trailing slash is ignored too ("/crm/deals/" is "/crm/deals").
func compilePath(pattern string) (pathPattern, error) {
	p := strings.ToLower(pattern)
	if len(p) > 1 && strings.HasSuffix(p, "/") && !strings.HasSuffix(p, "*/") {
		p = strings.TrimRight(p, "/")
	}
	pp := pathPattern{pattern: p}
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
			return pathPattern{}, err
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
func (pp *pathPattern) match(p string) (target string, ok bool) {
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
