package keying

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// source is where a placeholder takes its value from.
type source uint8

const (
	srcLiteral  source = iota // literal text, not a placeholder
	srcHeader                 // {header.NAME}
	srcQuery                  // {query.NAME}
	srcForm                   // {form.NAME}
	srcBody                   // {body.PATH}
	srcKey                    // {key}: the derived key (lookup URLs only)
	srcRecordID               // {record_id}: the record id (lookup URLs only)
)

var sourceNames = [...]string{
	srcLiteral:  "literal",
	srcHeader:   "header",
	srcQuery:    "query",
	srcForm:     "form",
	srcBody:     "body",
	srcKey:      "key",
	srcRecordID: "record_id",
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
	parts, serr := scan(s, parsePlaceholder)
	switch {
	case serr == nil:
	case serr.err != nil:
		return Template{}, fmt.Errorf("%w %q: placeholder at offset %d: %v", ErrTemplate, s, serr.off, serr.err)
	case serr.what == "":
		return Template{}, fmt.Errorf("%w %q: literal text has byte 0x%02x at offset %d (only visible ASCII is allowed)", ErrTemplate, s, s[serr.off], serr.off)
	default:
		return Template{}, fmt.Errorf("%w %q: %s at offset %d", ErrTemplate, s, serr.what, serr.off)
	}
	t := Template{src: s, parts: parts}
	for _, p := range parts {
		if p.src != srcLiteral {
			t.placeholders++
		}
		t.needsBody = t.needsBody || p.src == srcBody || p.src == srcForm
	}
	return t, nil
}

// scanError is why a template does not scan, and where.
type scanError struct {
	off  int    // offset in the template
	what string // "unbalanced '{'" or "unbalanced '}'"; "" for the byte at off, or a placeholder
	name string // the placeholder's text, when err is its problem
	err  error
}

// scan splits s into its literal runs and its placeholders, parsing the
// text between each pair of braces with ph. Braces must pair and not
// nest, and literal text is visible ASCII (0x21..0x7E).
func scan(s string, ph func(string) (part, error)) ([]part, *scanError) {
	var parts []part
	lit := 0 // start of the current literal run
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '{':
			end := strings.IndexAny(s[i+1:], "{}")
			if end < 0 || s[i+1+end] == '{' {
				return nil, &scanError{off: i, what: "unbalanced '{'"}
			}
			if lit < i {
				parts = append(parts, part{src: srcLiteral, text: s[lit:i]})
			}
			name := s[i+1 : i+1+end]
			p, err := ph(name)
			if err != nil {
				return nil, &scanError{off: i, name: name, err: err}
			}
			parts = append(parts, p)
			i += 1 + end // now at the closing brace
			lit = i + 1
		case c == '}':
			return nil, &scanError{off: i, what: "unbalanced '}'"}
		case c < 0x21 || c > 0x7e:
			return nil, &scanError{off: i}
		}
	}
	if lit < len(s) {
		parts = append(parts, part{src: srcLiteral, text: s[lit:]})
	}
	return parts, nil
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
		if !httpguts.ValidHeaderFieldName(name) {
			for i := 0; i < len(name); i++ {
				if !httpguts.IsTokenRune(rune(name[i])) {
					return part{}, fmt.Errorf("header name %q has invalid byte 0x%02x", name, name[i])
				}
			}
		}
		name = textproto.CanonicalMIMEHeaderKey(name)
	}
	return part{src: src, text: name}, nil
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

// Placeholder is one placeholder of a template: its source (header,
// query, form or body) and its name (the canonical header name, the
// parameter name or the body path).
type Placeholder struct{ Source, Name string }

// Placeholders returns t's placeholders, in order.
func (t Template) Placeholders() []Placeholder {
	var out []Placeholder
	for _, p := range t.parts {
		if p.src != srcLiteral {
			out = append(out, Placeholder{Source: p.src.String(), Name: p.text})
		}
	}
	return out
}
