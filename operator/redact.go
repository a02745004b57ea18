package operator

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
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
	"pwd",        // pwd, db_pwd, userPwd
	"passphrase", // passphrase, key_passphrase
	"session",    // X-Session-Id
	"credential", // X-Credentials, Access-Control-Allow-Credentials
	"apikey",     // X-Apikey
	"accesskey",  // accessKeyId, AccessKey, secretAccessKey
	"privatekey", // privatekey, PRIVATEKEY
	"assertion",  // client_assertion, X-Jwt-Assertion, saml_assertion
	"jwt",        // X-Jwt
	"csrf", "xsrf",
	"signature", // X-Signature, X-Hub-Signature
}

// IsCredentialHeader reports whether operator views hide the values of
// the header (or body field) called name. The rule, on the name in lower
// case: it contains one of "auth", "cookie", "token", "secret", "passw",
// "pwd", "passphrase", "session", "credential", "apikey", "accesskey",
// "privatekey", "assertion", "jwt", "csrf", "xsrf" or "signature"; or one
// of its words (split at "-", "_" and ".") is "key" (X-Api-Key, Api-Key,
// Idempotency-Key, access_key), or it is camelCase ending in "Key"
// (privateKey). It errs on the side of hiding: a harmless name that
// matches (Access-Control-Allow-Credentials, author, tokenizer_version)
// is hidden too.
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

// Body kinds, as Redactor.Body saw a stored body.
const (
	BodyEmpty    = ""         // no body
	BodyJSON     = "json"     // JSON (whatever its Content-Type, a UTF-8 BOM or an XSSI prefix allowed), laid out member by member
	BodyNDJSON   = "ndjson"   // JSON values one a line (NDJSON, JSON Lines), each laid out on its line
	BodyForm     = "form"     // a URL-encoded form, pairs joined by & or ;
	BodyUnparsed = "unparsed" // anything else (XML, multipart, other text, bytes): shown only as its size and digest
	BodyText     = "text"     // other UTF-8 text, shown as it is where the route opts in
	BodyBinary   = "binary"   // not UTF-8, where the route opts in: not shown as text
)

// Redactor hides the values of credential-like fields in stored bodies
// for operator views (the admin API and the console use the same one):
// every name IsCredentialHeader marks (password, secret, token, api_key,
// apikey, credential, private_key, authorization, pwd, accessKeyId,
// client_assertion, …) and the extra names it was made with (a route's
// redact_fields), whole names, any case. Bodies it cannot read field by
// field (XML, multipart, other text, bytes) it shows only as their size
// and digest, unless made WithUnparsed(true).
type Redactor struct {
	extra        []string // lower case
	showUnparsed bool
}

// WithUnparsed returns r showing the bodies it cannot redact field by
// field as they are (UTF-8 text as text, other bytes as BodyBinary), when
// show is true: a route's show_unparsed_bodies.
func (r Redactor) WithUnparsed(show bool) Redactor {
	r.showUnparsed = show
	return r
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
	// Text is what to show: JSON laid out with the hidden values replaced
	// by Redacted, a form with them replaced, for BodyUnparsed the body's
	// size and SHA-256 ("412 bytes, sha256 9f86…"), other text as it is;
	// "" for binary and empty bodies.
	Text string
	// Redactions counts the values replaced.
	Redactions int
}

// utf8BOM is the byte order mark some servers put before JSON.
var utf8BOM = []byte("\xef\xbb\xbf")

// xssiPrefixes are the lines some APIs put before JSON so that a page on
// another site cannot run it as a script.
var xssiPrefixes = []string{")]}',", ")]}'", "while(1);", "for(;;);"}

// Body prepares body, stored with Content-Type contentType, for an
// operator view. JSON is recognised by its content whatever the
// Content-Type says (a leading UTF-8 BOM is dropped, an XSSI prefix such
// as )]}' kept as it is) and laid out with indent per level ("" lays it
// out on one line); so are JSON values one a line (NDJSON), each on its
// line; a URL-encoded form (pairs joined by & or ;) is recognised by its
// Content-Type, or by its shape when the Content-Type is missing or
// text/plain. In all of them the values of the fields r hides are
// replaced by Redacted, at any depth, and so are those of JSON or forms
// held in a string value. Anything else (XML, multipart, other text,
// bytes) cannot be read field by field: it is shown only as its size and
// digest, unless r shows unparsed bodies (then text as it is, bytes not
// at all).
func (r Redactor) Body(body []byte, contentType, indent string) RedactedBody {
	if len(body) == 0 {
		return RedactedBody{Kind: BodyEmpty}
	}
	if utf8.Valid(body) {
		if out, ok := r.parse(string(bytes.TrimPrefix(body, utf8BOM)), contentType, indent, 0); ok {
			return out
		}
	}
	switch {
	case !r.showUnparsed:
		sum := sha256.Sum256(body)
		return RedactedBody{Kind: BodyUnparsed, Text: fmt.Sprintf("%d bytes, sha256 %x", len(body), sum)}
	case !utf8.Valid(body):
		return RedactedBody{Kind: BodyBinary}
	}
	return RedactedBody{Kind: BodyText, Text: string(body)}
}

// parse lays out s, UTF-8 text, as JSON, XSSI-prefixed JSON, NDJSON or a
// URL-encoded form (see Body), its hidden values replaced; ok is false
// when it is none of them. depth is the JSON nesting s is found at.
func (r Redactor) parse(s, contentType, indent string, depth int) (out RedactedBody, ok bool) {
	prefix := ""
	for _, p := range xssiPrefixes {
		if rest, found := strings.CutPrefix(s, p); found {
			value := strings.TrimLeft(rest, " \t\r\n")
			prefix, s = p+rest[:len(rest)-len(value)], value
			break
		}
	}
	if json.Valid([]byte(s)) {
		out.Kind = BodyJSON
		var sb strings.Builder
		sb.WriteString(prefix)
		r.writeJSON(&sb, gjson.Parse(s), depth, indent, &out.Redactions)
		out.Text = sb.String()
		return out, true
	}
	if prefix != "" {
		return out, false
	}
	if lines, ok := r.ndjson(s, depth, &out.Redactions); ok {
		out.Kind, out.Text = BodyNDJSON, lines
		return out, true
	}
	if isForm(contentType, []byte(s)) {
		return r.form(s), true
	}
	return out, false
}

// ndjson lays out s as JSON values one a line, each on its line (blank
// lines and line ends kept), its hidden values replaced (counted in n);
// ok is false unless s has at least two lines, each JSON or blank, one
// of them JSON.
func (r Redactor) ndjson(s string, depth int, n *int) (string, bool) {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) < 2 {
		return "", false
	}
	var sb strings.Builder
	redactions, values := 0, 0
	for _, line := range lines {
		body := strings.TrimRight(line, "\r\n")
		if strings.TrimSpace(body) == "" {
			sb.WriteString(line)
			continue
		}
		if !json.Valid([]byte(body)) {
			return "", false
		}
		r.writeJSON(&sb, gjson.Parse(body), depth, "", &redactions)
		sb.WriteString(line[len(body):])
		values++
	}
	if values == 0 {
		return "", false
	}
	*n += redactions
	return sb.String(), true
}

// isForm reports whether body is a URL-encoded form: declared so, or, when
// the Content-Type is missing or text/plain, shaped like one (name=value
// pairs joined by & or ;, no white space, every pair with a name and an =).
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
	for pair := range strings.FieldsFuncSeq(string(body), isFormSeparator) {
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

// isFormSeparator reports whether c separates the pairs of a URL-encoded
// form: '&', or ';' (which HTML 4 recommended, and some servers still
// split on).
func isFormSeparator(c rune) bool { return c == '&' || c == ';' }

// form replaces the values of hidden fields of a URL-encoded form, keeping
// the pairs in their order and as they were written otherwise, their
// separators (& or ;) included.
func (r Redactor) form(body string) RedactedBody {
	out := RedactedBody{Kind: BodyForm}
	var sb strings.Builder
	for len(body) > 0 {
		end := strings.IndexFunc(body, isFormSeparator)
		if end < 0 {
			end = len(body)
		}
		pair := body[:end]
		name, _, ok := strings.Cut(pair, "=")
		plain, err := url.QueryUnescape(name)
		if err != nil {
			plain = name
		}
		if ok && r.Hides(plain) {
			pair = name + "=" + Redacted
			out.Redactions++
		}
		sb.WriteString(pair)
		if end < len(body) {
			sb.WriteByte(body[end])
			end++
		}
		body = body[end:]
	}
	out.Text = sb.String()
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
	case v.Type == gjson.String:
		r.writeString(sb, v, depth, n)
		return
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

// writeString writes the JSON string v, found at depth: as it was, unless
// it holds JSON, NDJSON or a URL-encoded form with hidden values, which it
// holds laid out on one line with them replaced (counted in n) instead.
// Too deep to look into, a string that might hold any of them is not
// shown.
func (r Redactor) writeString(sb *strings.Builder, v gjson.Result, depth int, n *int) {
	if depth+1 >= maxRedactDepth {
		if strings.ContainsAny(v.String(), "{[=") {
			sb.WriteString(`"(nested too deeply to show)"`)
		} else {
			sb.WriteString(v.Raw)
		}
		return
	}
	inner, ok := r.parse(v.String(), "", "", depth+1)
	if !ok || inner.Redactions == 0 {
		sb.WriteString(v.Raw)
		return
	}
	var quoted bytes.Buffer
	enc := json.NewEncoder(&quoted)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(inner.Text) // a string always encodes
	sb.Write(bytes.TrimSuffix(quoted.Bytes(), []byte("\n")))
	*n += inner.Redactions
}
