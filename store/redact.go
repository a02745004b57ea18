package store

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Redacted replaces a credential in operator views.
const Redacted = "[redacted]"

// credentialParts are the fragments whose presence anywhere in a header
// name (lower-cased) marks it as a credential.
var credentialParts = []string{
	"auth",       // Authorization, Proxy-Authorization, WWW-Authenticate, X-Auth-Token, X-Oauth-…
	"cookie",     // Cookie, Set-Cookie, Set-Cookie2
	"token",      // X-Csrf-Token, X-Amz-Security-Token, X-Access-Token
	"secret",     // X-Client-Secret
	"passw",      // X-Password, X-Passwd
	"session",    // X-Session-Id
	"credential", // X-Credentials, Access-Control-Allow-Credentials
	"apikey",     // X-Apikey
	"jwt",        // X-Jwt-Assertion
	"csrf", "xsrf",
	"signature", // X-Signature, X-Hub-Signature
}

// IsCredentialHeader reports whether operator views hide the values of
// the header called name. The rule, on the name in lower case: it contains
// one of "auth", "cookie", "token", "secret", "passw", "session",
// "credential", "apikey", "jwt", "csrf", "xsrf" or "signature"; or one of
// its words (split at "-", "_" and ".") is "key" (X-Api-Key, Api-Key,
// Idempotency-Key), or it is camelCase ending in "Key" (privateKey). It errs on the side of hiding: a harmless header that
// matches (Access-Control-Allow-Credentials) is hidden too.
func IsCredentialHeader(name string) bool {
	n := strings.ToLower(name)
	for _, p := range credentialParts {
		if strings.Contains(n, p) {
			return true
		}
	}
	if k := len(name) - 3; k > 0 && name[k:] == "Key" && 'a' <= name[k-1] && name[k-1] <= 'z' {
		return true // a camelCase JSON member: privateKey, signingKey
	}
	for w := range strings.FieldsFuncSeq(n, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		if w == "key" {
			return true
		}
	}
	return false
}

// RedactHeader returns a copy of h for operator views (the admin API, the
// operator console) with the values of every credential header (see
// IsCredentialHeader) replaced by Redacted, one for one, so the number of
// values still shows. A Set-Cookie value keeps its cookie name and
// attributes, only the value is hidden: `sid=[redacted]; Path=/; HttpOnly`.
// h itself is never changed: replays still send the stored headers. nil
// stays nil.
func RedactHeader(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	out := make(http.Header, len(h))
	for name, values := range h {
		if !IsCredentialHeader(name) {
			out[name] = append([]string(nil), values...)
			continue
		}
		setCookie := http.CanonicalHeaderKey(name) == "Set-Cookie" || http.CanonicalHeaderKey(name) == "Set-Cookie2"
		red := make([]string, len(values))
		for i, v := range values {
			red[i] = Redacted
			if setCookie {
				red[i] = redactSetCookie(v)
			}
		}
		out[name] = red
	}
	return out
}

// redactSetCookie hides the value of a Set-Cookie header value and keeps
// the cookie's name and attributes.
func redactSetCookie(v string) string {
	pair, attrs, _ := strings.Cut(v, ";")
	name, _, ok := strings.Cut(pair, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t\"") {
		return Redacted
	}
	out := name + "=" + Redacted
	if attrs != "" {
		out += ";" + attrs
	}
	return out
}

// maxRedactDepth is the deepest JSON nesting laid out member by member;
// deeper values are not shown (they could hide credentials).
const maxRedactDepth = 32

// Body kinds, as RedactBody saw a stored body.
const (
	BodyEmpty  = ""       // no body
	BodyJSON   = "json"   // JSON (whatever its Content-Type, a UTF-8 BOM allowed), laid out member by member
	BodyForm   = "form"   // a URL-encoded form
	BodyText   = "text"   // other UTF-8 text, shown as it is
	BodyBinary = "binary" // not UTF-8: not shown as text
)

// Redactor hides the values of credential-like fields in stored bodies
// for operator views (the admin API and the console use the same one):
// every name IsCredentialHeader marks (password, secret, token, api_key,
// apikey, credential, private_key, authorization, …) and the extra names
// it was made with (a route's redact_fields), whole names, any case.
type Redactor struct {
	extra []string // lower case
}

// NewRedactor returns a Redactor that also hides the fields named in
// extra (compared in lower case, as whole names).
func NewRedactor(extra []string) Redactor {
	r := Redactor{}
	for _, n := range extra {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
			r.extra = append(r.extra, n)
		}
	}
	return r
}

// Hides reports whether the value of the field called name is hidden.
func (r Redactor) Hides(name string) bool {
	return IsCredentialHeader(name) || slices.Contains(r.extra, strings.ToLower(name))
}

// RedactedBody is a stored body as operators see it.
type RedactedBody struct {
	Kind string // one of the Body kinds
	// Text is the body to show: JSON laid out with the hidden values
	// replaced by Redacted, a form with them replaced, other text as it
	// is; "" for binary and empty bodies.
	Text string
	// Redactions counts the values replaced.
	Redactions int
}

// utf8BOM is the byte order mark some servers put before JSON.
var utf8BOM = []byte("\xef\xbb\xbf")

// Body prepares body, stored with Content-Type contentType, for an
// operator view. JSON is recognised by its content whatever the
// Content-Type says (a leading UTF-8 BOM is dropped) and laid out with
// indent per level ("" lays it out on one line); a URL-encoded form is
// recognised by its Content-Type, or by its shape when the Content-Type
// is missing or text/plain; in both, the values of the fields r hides are
// replaced by Redacted. Other UTF-8 text is returned as it is, binary
// bodies not at all.
func (r Redactor) Body(body []byte, contentType, indent string) RedactedBody {
	switch {
	case len(body) == 0:
		return RedactedBody{Kind: BodyEmpty}
	case !utf8.Valid(body):
		return RedactedBody{Kind: BodyBinary}
	}
	trimmed := bytes.TrimPrefix(body, utf8BOM)
	if json.Valid(trimmed) {
		out := RedactedBody{Kind: BodyJSON}
		var sb strings.Builder
		r.writeJSON(&sb, gjson.ParseBytes(trimmed), 0, indent, &out.Redactions)
		out.Text = sb.String()
		return out
	}
	if isForm(contentType, body) {
		return r.form(string(body))
	}
	return RedactedBody{Kind: BodyText, Text: string(body)}
}

// isForm reports whether body is a URL-encoded form: declared so, or, when
// the Content-Type is missing or text/plain, shaped like one (name=value
// pairs joined by &, no white space, every pair with a name and an =).
func isForm(contentType string, body []byte) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "application/x-www-form-urlencoded":
		return true
	case "", "text/plain":
	default:
		return false
	}
	if bytes.ContainsFunc(body, unicode.IsSpace) {
		return false
	}
	for pair := range strings.SplitSeq(string(body), "&") {
		name, _, ok := strings.Cut(pair, "=")
		if !ok || name == "" {
			return false
		}
		if _, err := url.QueryUnescape(name); err != nil {
			return false
		}
	}
	return true
}

// form replaces the values of hidden fields of a URL-encoded form, keeping
// the pairs in their order and as they were written otherwise.
func (r Redactor) form(body string) RedactedBody {
	out := RedactedBody{Kind: BodyForm}
	pairs := strings.Split(body, "&")
	for i, pair := range pairs {
		name, _, ok := strings.Cut(pair, "=")
		plain, err := url.QueryUnescape(name)
		if err != nil {
			plain = name
		}
		if ok && r.Hides(plain) {
			pairs[i] = name + "=" + Redacted
			out.Redactions++
		}
	}
	out.Text = strings.Join(pairs, "&")
	return out
}

// writeJSON lays out a valid JSON value, indent per level (one line when
// indent is ""), members in their order, the values of hidden members
// replaced (counted in n).
func (r Redactor) writeJSON(sb *strings.Builder, v gjson.Result, depth int, indent string, n *int) {
	open, close := "", ""
	switch {
	case v.IsObject():
		open, close = "{", "}"
	case v.IsArray():
		open, close = "[", "]"
	default:
		sb.WriteString(v.Raw)
		return
	}
	if depth >= maxRedactDepth {
		sb.WriteString(`"(nested too deeply to show)"`)
		return
	}
	newline := func(level int) {
		if indent != "" {
			sb.WriteByte('\n')
			sb.WriteString(strings.Repeat(indent, level))
		}
	}
	colon := ":"
	if indent != "" {
		colon = ": "
	}
	sb.WriteString(open)
	first := true
	v.ForEach(func(key, val gjson.Result) bool {
		if !first {
			sb.WriteByte(',')
		}
		first = false
		newline(depth + 1)
		if open == "{" {
			sb.WriteString(key.Raw)
			sb.WriteString(colon)
			if r.Hides(key.String()) {
				sb.WriteString(`"` + Redacted + `"`)
				*n++
				return true
			}
		}
		r.writeJSON(sb, val, depth+1, indent, n)
		return true
	})
	if !first {
		newline(depth)
	}
	sb.WriteString(close)
}
