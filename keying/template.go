package keying

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"
)

// source is where a placeholder takes its value from.
type source uint8

const (
	srcLiteral source = iota // literal text, not a placeholder
	srcHeader                // {header.NAME}
	srcQuery                 // {query.NAME}
	srcForm                  // {form.NAME}
	srcBody                  // {body.PATH}
)

var sourceNames = [...]string{
	srcLiteral: "literal",
	srcHeader:  "header",
	srcQuery:   "query",
	srcForm:    "form",
	srcBody:    "body",
}

func (s source) String() string { return sourceNames[s] }

// part is one piece of a template: literal text or a placeholder.
type part struct {
	src source
	// text is the literal text (srcLiteral), the canonical header name
	// (srcHeader), the parameter name (srcQuery, srcForm) or the gjson path
	// (srcBody).
	text string
}

// Template is a parsed key or scope template: literal text and placeholders
//
//	{header.NAME} {query.NAME} {form.NAME} {body.PATH}
//
// where PATH uses gjson path syntax. See the package documentation for the
// full syntax. The zero Template has no parts, resolves to "" and is never ok.
// A Template is immutable and safe for concurrent use.
type Template struct {
	src   string
	parts []part
	// placeholders is the number of parts that are placeholders.
	placeholders int
	needsBody    bool
}

// ErrTemplate is wrapped by every error ParseTemplate returns.
var ErrTemplate = errors.New("invalid template")

// ParseTemplate parses a key or scope template.
//
// It fails when the template is empty, when braces are unbalanced or nested,
// when a placeholder names an unknown source (anything but header, query,
// form and body) or has an empty name, when a header name is not a valid
// HTTP field name, and when literal text holds a byte outside visible ASCII
// (0x21..0x7E), since such a byte could never be part of a valid key.
// A template made only of literal text is valid (useful as a fixed scope).
func ParseTemplate(s string) (Template, error) {
	if s == "" {
		return Template{}, fmt.Errorf("%w: empty", ErrTemplate)
	}
	t := Template{src: s}
	lit := 0 // start of the current literal run
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '{':
			end := strings.IndexAny(s[i+1:], "{}")
			if end < 0 || s[i+1+end] == '{' {
				return Template{}, fmt.Errorf("%w %q: unbalanced '{' at offset %d", ErrTemplate, s, i)
			}
			if lit < i {
				t.parts = append(t.parts, part{src: srcLiteral, text: s[lit:i]})
			}
			p, err := parsePlaceholder(s[i+1 : i+1+end])
			if err != nil {
				return Template{}, fmt.Errorf("%w %q: placeholder at offset %d: %v", ErrTemplate, s, i, err)
			}
			t.parts = append(t.parts, p)
			t.placeholders++
			if p.src == srcBody || p.src == srcForm {
				t.needsBody = true
			}
			i += 1 + end // now at the closing brace
			lit = i + 1
		case c == '}':
			return Template{}, fmt.Errorf("%w %q: unbalanced '}' at offset %d", ErrTemplate, s, i)
		case c < 0x21 || c > 0x7e:
			return Template{}, fmt.Errorf("%w %q: literal text has byte 0x%02x at offset %d (only visible ASCII is allowed)", ErrTemplate, s, c, i)
		}
	}
	if lit < len(s) {
		t.parts = append(t.parts, part{src: srcLiteral, text: s[lit:]})
	}
	return t, nil
}

// parsePlaceholder parses the text between the braces: "source.name".
func parsePlaceholder(body string) (part, error) {
	srcName, name, found := strings.Cut(body, ".")
	if !found {
		if body == "" {
			return part{}, errors.New("empty placeholder {}")
		}
		return part{}, fmt.Errorf("%q has no source (want {header.NAME}, {query.NAME}, {form.NAME} or {body.PATH})", body)
	}
	var src source
	switch srcName {
	case "header":
		src = srcHeader
	case "query":
		src = srcQuery
	case "form":
		src = srcForm
	case "body":
		src = srcBody
	default:
		return part{}, fmt.Errorf("unknown source %q (want header, query, form or body)", srcName)
	}
	if name == "" {
		return part{}, fmt.Errorf("empty name after %q", srcName+".")
	}
	if src == srcHeader {
		for i := 0; i < len(name); i++ {
			if !isTokenChar(name[i]) {
				return part{}, fmt.Errorf("header name %q has invalid byte 0x%02x", name, name[i])
			}
		}
		name = textproto.CanonicalMIMEHeaderKey(name)
	}
	return part{src: src, text: name}, nil
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// MustParseTemplate is like ParseTemplate but panics on error. It is meant
// for templates fixed in code and tests.
func MustParseTemplate(s string) Template {
	t, err := ParseTemplate(s)
	if err != nil {
		panic(err)
	}
	return t
}

// String returns the template's source text, as given to ParseTemplate.
func (t Template) String() string { return t.src }

// NeedsBody reports whether the template has any {body.*} or {form.*}
// placeholder, i.e. whether resolving it may read the request body.
func (t Template) NeedsBody() bool { return t.needsBody }

// FingerprintRule selects (Body) and drops (Ignore) JSON fields of the
// request body, named by gjson paths, before the body is fingerprinted.
// The zero rule fingerprints the whole canonical body.
//
// Body paths may use any gjson path syntax. Ignore paths are deleted with
// sjson, so they must use the simpler sjson path syntax (keys, array
// indexes, escaped dots; no queries or modifiers); see Validate.
type FingerprintRule struct {
	Body   []string `json:"body,omitempty"`
	Ignore []string `json:"ignore,omitempty"`
	// Query: the request's query string, its parameters sorted, counts in
	// the fingerprint (true); false leaves it out. Encode and IsZero do
	// not look at it.
	Query bool `json:"-"`
}
