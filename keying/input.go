package keying

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/dunglas/httpsfv"
	"github.com/tidwall/gjson"
)

// bodyState records what is known about the request body as JSON.
type bodyState uint8

const (
	bodyUnknown bodyState = iota // not looked at yet
	bodyEmpty                    // empty or only white space
	bodyJSON                     // valid JSON; Input.canon holds its canonical form
	bodyInvalid                  // not valid JSON (or too deep); Input.jsonErr says why
)

// Input is one request's data as the keying functions see it. Each kind of
// data is parsed lazily, at most once: the query string on the first
// {query.*}, the form on the first {form.*}, and the body's JSON validity and
// canonical form on the first {body.*} placeholder or Fingerprint call, so
// the key, the scope and the fingerprint of one request share one JSON pass.
//
// An Input is meant for one request and one goroutine; it is not safe for
// concurrent use. The body is not copied: the caller must not modify it while
// the Input is in use.
type Input struct {
	method   string
	header   http.Header
	rawQuery string
	body     []byte
	target   string // see SetTarget

	query       url.Values
	queryParsed bool
	form        url.Values
	formParsed  bool

	state   bodyState
	canon   string // canonical JSON of the body when state == bodyJSON
	jsonErr error  // why the body is not JSON when state == bodyInvalid
}

// NewInput returns the Input for one request: its method, header (the
// request's http.Header, canonical keys), raw query string (URL.RawQuery,
// without '?') and the request body already read (bounded by the caller).
// header may be nil and body may be empty.
func NewInput(method string, header http.Header, rawQuery string, body []byte) *Input {
	return &Input{method: method, header: header, rawQuery: rawQuery, body: body}
}

// Method returns the request method given to NewInput.
func (in *Input) Method() string { return in.method }

// keyHeaderValue returns the value of the header name (canonical form) as a
// key, following the IETF Idempotency-Key draft: the field arrives as one
// field line holding either a Structured Field string (RFC 8941, such as
// "abc"; its parameters are ignored) or a bare value without a comma. Two
// field lines, a comma in a bare value (a list: proxies fold repeated
// fields into one line with commas) and a malformed Structured Field
// string are errors wrapping ErrInvalidKey, never the first of several
// keys. The errors name the header, never its value.
func (in *Input) keyHeaderValue(name string) (string, error) {
	vs := in.header[name]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("%w: header %s arrived as %d field lines; send one key in one field line", ErrInvalidKey, name, len(vs))
	}
	v := strings.Trim(vs[0], " \t")
	if v == "" || v[0] != '"' {
		if strings.IndexByte(v, ',') >= 0 {
			return "", fmt.Errorf("%w: header %s holds a list (a comma in a bare value); send one key, or quote it as a Structured Field string", ErrInvalidKey, name)
		}
		return v, nil
	}
	s, err := sfString(v)
	if err != nil {
		return "", fmt.Errorf("%w: header %s starts with a quote but is not a valid Structured Field string (RFC 8941)", ErrInvalidKey, name)
	}
	return s, nil
}

// sfString returns the string of the Structured Field string item v
// (RFC 8941, such as "abc"; parameters are ignored), or an error when v
// is not one.
func sfString(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && plainSFChars(v[1:len(v)-1]) {
		return v[1 : len(v)-1], nil // the common case, without the parser
	}
	item, err := httpsfv.UnmarshalItem([]string{v})
	if err != nil {
		return "", err
	}
	s, ok := item.Value.(string)
	if !ok {
		return "", errors.New("not a string item")
	}
	return s, nil
}

// FormatKeyHeader returns key as a Structured Field string (RFC 8941),
// as the IETF Idempotency-Key draft requires of a client: "evt_184".
// A key that ValidateKey accepts always has one.
func FormatKeyHeader(key string) (string, error) {
	if plainSFChars(key) {
		return `"` + key + `"`, nil // nothing to escape: one allocation
	}
	return httpsfv.Marshal(httpsfv.NewItem(key))
}

// ParseKeyHeader is FormatKeyHeader's reverse, for an upstream: the key
// in a forwarded Idempotency-Key value, the string of a Structured Field
// string ("evt_184"), or v as it is when it is not one.
func ParseKeyHeader(v string) string { return unquoteSF(strings.Trim(v, " \t")) }

// headerValue returns the first value of the header name (canonical form),
// trimmed, and unquoted when it is a Structured Field string (RFC 8941).
// Scope templates and lookup URLs read headers this way; keys read them
// strictly (keyHeaderValue).
func (in *Input) headerValue(name string) string {
	vs := in.header[name]
	if len(vs) == 0 {
		return ""
	}
	return unquoteSF(strings.Trim(vs[0], " \t"))
}

// unquoteSF returns the string of a Structured Field string item such as
// "abc" (parameters are ignored), or v itself when v is not one.
func unquoteSF(v string) string {
	if len(v) < 2 || v[0] != '"' {
		return v
	}
	if s, err := sfString(v); err == nil {
		return s
	}
	return v
}

// plainSFChars reports whether s may appear unescaped inside an SF string.
func plainSFChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func (in *Input) queryValue(name string) string {
	if !in.queryParsed {
		in.queryParsed = true
		// ParseQuery keeps every pair it could decode; a bad pair only
		// makes that one parameter unavailable.
		in.query, _ = url.ParseQuery(in.rawQuery)
	}
	return in.query.Get(name)
}

const formType = "application/x-www-form-urlencoded"

func (in *Input) formValue(name string) string {
	if !in.formParsed {
		in.formParsed = true
		if in.isForm() {
			in.form, _ = url.ParseQuery(string(in.body))
		}
	}
	return in.form.Get(name)
}

// isForm reports whether the Content-Type is application/x-www-form-urlencoded.
func (in *Input) isForm() bool {
	ct := in.header["Content-Type"]
	if len(ct) == 0 {
		return false
	}
	mt, _, _ := strings.Cut(ct[0], ";")
	return strings.EqualFold(strings.Trim(mt, " \t"), formType)
}

// bodyValue resolves a gjson path against the canonical body: strings give
// their unescaped text, numbers their text as written, booleans true/false;
// objects, arrays, null and missing values give "".
func (in *Input) bodyValue(path string) (string, error) {
	doc, err := in.json()
	if err != nil || doc == "" {
		return "", err
	}
	r := gjson.Get(doc, path)
	switch r.Type {
	case gjson.String:
		return r.Str, nil
	case gjson.Number, gjson.True, gjson.False:
		return r.Raw, nil
	}
	return "", nil
}

// lookupKey is lookup for a key template: headers are read as keys
// (keyHeaderValue).
func (in *Input) lookupKey(p part) (string, error) {
	if p.src == srcHeader {
		return in.keyHeaderValue(p.text)
	}
	return in.lookup(p)
}

// lookup returns the value of one placeholder part.
func (in *Input) lookup(p part) (string, error) {
	switch p.src {
	case srcHeader:
		return in.headerValue(p.text), nil
	case srcQuery:
		return in.queryValue(p.text), nil
	case srcForm:
		return in.formValue(p.text), nil
	case srcBody:
		return in.bodyValue(p.text)
	}
	return p.text, nil
}
