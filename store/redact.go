package store

import (
	"net/http"
	"strings"
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
