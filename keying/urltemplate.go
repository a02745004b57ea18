package keying

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxURLTemplate is the longest URL template ParseURLTemplate accepts.
const MaxURLTemplate = 2048

// URLTemplate is the template of a lookup URL by which the gateway asks an
// upstream whether an operation took effect: literal text, {key} (the
// derived key), {record_id} (the record id), the request placeholders of key
// templates, and {env.NAME}, which stays as written until ExpandEnv fills
// it in when the check runs. It is immutable and safe for concurrent use.
type URLTemplate struct {
	src   string
	parts []part
}

var (
	// placeholderRE matches a placeholder: a '{' up to the next '}'.
	placeholderRE = regexp.MustCompile(`\{([^}]*)\}`)
	envRE         = regexp.MustCompile(`\{env\.([A-Za-z_][A-Za-z0-9_]*)\}`)
	// validEnvName reports whether s is an environment variable name:
	// letters, digits and '_', not starting with a digit.
	validEnvName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString
)

// ParseURLTemplate parses a lookup URL template: an absolute http or
// https URL (or one that starts with an {env.NAME} placeholder holding
// its base), at most MaxURLTemplate bytes of visible ASCII. Its scheme,
// userinfo, host and port are static text or {env.NAME}: a request
// placeholder there ({key}, {record_id}, {header.NAME}, …) is an error,
// since it would send the lookup, with the credentials of its headers,
// where a caller says, and let that host's answer decide "applied".
func ParseURLTemplate(s string) (URLTemplate, error) {
	t, err := parseTemplate(s, parseURLPlaceholder, "a URL is visible ASCII; escape it")
	if err != nil {
		return t, err
	}
	if name := requestPlaceholderInAuthority(s); name != "" {
		return t, fmt.Errorf("%s: placeholder {%s} is in the scheme, host or port: those take static text and {env.NAME} only "+
			"(a request value there would send the lookup, with its credentials, where the caller says, and let that host decide \"applied\")", quote(s), name)
	}
	if strings.HasPrefix(s, "{env.") {
		return t, nil // the base comes from the environment
	}
	// With every placeholder standing for a plain value, the template
	// must be an absolute http(s) URL with a host.
	u, err := url.Parse(placeholderRE.ReplaceAllString(s, "0"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return t, fmt.Errorf("%s is not an absolute http or https URL (or one whose base is an {env.NAME} placeholder)", quote(s))
	}
	return t, nil
}

// requestPlaceholderInAuthority returns the name of the first placeholder
// other than {env.NAME} in the part of a (scanned) URL template s up to
// the end of its authority: the first '/', '?' or '#' after its "://",
// or after its start when the scheme comes from {env.NAME}. Placeholder
// text does not count as a separator. "" when there is none.
func requestPlaceholderInAuthority(s string) string {
	matches := placeholderRE.FindAllStringSubmatchIndex(s, -1)
	masked := []byte(s)
	for _, m := range matches {
		for i := m[0]; i < m[1]; i++ {
			masked[i] = 'x'
		}
	}
	start := 0
	if i := strings.Index(string(masked), "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(s)
	if i := strings.IndexAny(string(masked[start:]), "/?#"); i >= 0 {
		end = start + i
	}
	for _, m := range matches {
		if name := s[m[2]:m[3]]; m[0] < end && !strings.HasPrefix(name, "env.") {
			return name
		}
	}
	return ""
}

func parseURLPlaceholder(name string) (part, error) {
	switch env, isEnv := strings.CutPrefix(name, "env."); {
	case name == "key":
		return part{src: srcKey}, nil
	case name == "record_id" || name == "key_id": // key_id: the older name
		return part{src: srcRecordID}, nil
	case isEnv && !validEnvName(env):
		return part{}, fmt.Errorf("%s is not an environment variable name", quote(env))
	case isEnv:
		return part{src: srcLiteral, text: "{" + name + "}"}, nil
	}
	p, err := parsePlaceholder(name)
	if err != nil {
		return part{}, fmt.Errorf("%v (or {key}, {record_id}, {env.NAME})", err)
	}
	return p, nil
}

// String returns the template as written.
func (t URLTemplate) String() string { return t.src }

// IsZero reports whether t is the zero template.
func (t URLTemplate) IsZero() bool { return t.src == "" }

// Resolve fills in the request's placeholders: {key}, {record_id} and the
// request values, each URL-escaped (every byte but A-Z a-z 0-9 - . _ ~
// becomes %XX), so a value can neither end its query parameter nor its
// path segment, nor start a fragment. {env.NAME} placeholders stay as
// written, for ExpandEnv when the check runs. ok is false when a
// placeholder is empty: a lookup for "" would find the wrong thing. A
// value that makes a whole path segment "." or ".." (which a server
// resolves to another path) is an error.
func (t URLTemplate) Resolve(key, keyID string, in *Input) (resolved string, ok bool, err error) {
	u, ok, err := t.resolve(key, keyID, in, urlEscape)
	if err != nil || !ok {
		return "", ok, err
	}
	if seg := dotSegment(u); seg != "" {
		return "", false, fmt.Errorf("a request value makes the path segment %q, which would name another path", seg)
	}
	return u, true, nil
}

// dotSegment returns the first segment of the path of a resolved lookup
// URL u that is "." or "..": the path runs from the first '/' after the
// authority (after "://", or after the {env.NAME} base) to the first '?'
// or '#'. "" when there is none.
func dotSegment(u string) string {
	rest := u
	if _, after, ok := strings.Cut(u, "://"); ok {
		rest = after
	}
	i := strings.IndexAny(rest, "/?#")
	if i < 0 || rest[i] != '/' {
		return ""
	}
	path := rest[i:]
	if j := strings.IndexAny(path, "?#"); j >= 0 {
		path = path[:j]
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return seg
		}
	}
	return ""
}

// urlEscape escapes every byte but A-Z a-z 0-9 - . _ ~.
func urlEscape(v string) string { return strings.ReplaceAll(url.QueryEscape(v), "+", "%20") }

func (t URLTemplate) resolve(key, keyID string, in *Input, escape func(string) string) (string, bool, error) {
	var b strings.Builder
	for _, p := range t.parts {
		var v string
		switch p.src {
		case srcLiteral:
			b.WriteString(p.text)
			continue
		case srcKey:
			v = key
		case srcRecordID:
			v = keyID
		default:
			var err error
			if v, err = in.lookup(p); err != nil {
				return "", false, err
			}
		}
		if v == "" {
			return "", false, nil
		}
		b.WriteString(escape(v))
	}
	return b.String(), true, nil
}

// ParseMatchTemplate parses the template of a value a lookup's answer
// must hold (a verify rule's found.match): literal text (visible ASCII),
// {key}, {record_id} and the request placeholders of key templates. No
// {env.NAME}: the value is compared with the answer, never sent.
// Resolve it with ResolveText.
func ParseMatchTemplate(s string) (URLTemplate, error) {
	return parseTemplate(s, parseMatchPlaceholder, "literal text is visible ASCII")
}

// parseTemplate scans s (at most MaxURLTemplate bytes) into parts with
// the placeholder parser of its kind; bytes names what the kind allows,
// for the error about a byte it does not.
func parseTemplate(s string, placeholder func(string) (part, error), bytes string) (URLTemplate, error) {
	t := URLTemplate{src: s}
	if len(s) > MaxURLTemplate {
		return t, fmt.Errorf("is longer than %d bytes", MaxURLTemplate)
	}
	parts, serr := scan(s, placeholder)
	switch {
	case serr == nil:
	case serr.err != nil:
		return t, fmt.Errorf("%s: placeholder {%s}: %v", quote(s), serr.name, serr.err)
	case serr.what == "":
		return t, fmt.Errorf("%s: byte 0x%02x at offset %d (%s)", quote(s), s[serr.off], serr.off, bytes)
	default:
		return t, fmt.Errorf("%s: %s at offset %d", quote(s), serr.what, serr.off)
	}
	t.parts = parts
	return t, nil
}

func parseMatchPlaceholder(name string) (part, error) {
	switch {
	case name == "key":
		return part{src: srcKey}, nil
	case name == "record_id" || name == "key_id": // key_id: the older name
		return part{src: srcRecordID}, nil
	case strings.HasPrefix(name, "env."):
		return part{}, fmt.Errorf("{env.NAME} is not allowed here (the value is compared with the answer, not sent)")
	}
	p, err := parsePlaceholder(name)
	if err != nil {
		return part{}, fmt.Errorf("%v (or {key}, {record_id})", err)
	}
	return p, nil
}

// MustParseMatchTemplate is like ParseMatchTemplate but panics on error,
// for templates fixed in code and tests.
func MustParseMatchTemplate(s string) URLTemplate {
	t, err := ParseMatchTemplate(s)
	if err != nil {
		panic(err)
	}
	return t
}

// ResolveText is Resolve without the escaping: the values as they are,
// for a template made by ParseMatchTemplate. ok is false when a
// placeholder is empty.
func (t URLTemplate) ResolveText(key, keyID string, in *Input) (resolved string, ok bool, err error) {
	return t.resolve(key, keyID, in, func(v string) string { return v })
}

// CheckEnvText checks the template of a header a lookup sends: text
// without control characters whose only placeholders are {env.NAME}.
func CheckEnvText(s string) error {
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

// ExpandEnv replaces the {env.NAME} placeholders in s by the values of
// the environment variables, as they are ("" for one that is not set).
// Other text, braces included, stays.
func ExpandEnv(s string) string {
	return envRE.ReplaceAllStringFunc(s, func(p string) string { return os.Getenv(p[len("{env.") : len(p)-1]) })
}

// quote returns s quoted as a Go string, cut to 64 characters so that a
// huge value does not flood an error message.
func quote(s string) string {
	if utf8.RuneCountInString(s) > 64 {
		return fmt.Sprintf("%.64q...", s)
	}
	return strconv.Quote(s)
}
