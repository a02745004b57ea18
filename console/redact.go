package console

import (
	"net/http"
	"slices"
	"strings"
)

// redacted replaces a credential's value on screen.
const redacted = "[redacted]"

// TODO(redaction): replace sensitiveName and redactHeader with the shared
// redaction of stored responses in package store once it exists, so the
// admin API and the console hide exactly the same things.

// sensitiveName reports whether a header name or a JSON member name looks
// like it carries a credential: cookies, Authorization, and anything named
// like a token, secret, password, session, signature or key
// (Idempotency-Key and X-Api-Key included). It errs on the side of hiding.
func sensitiveName(name string) bool {
	n := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
			return r
		case 'A' <= r && r <= 'Z':
			return r + ('a' - 'A')
		}
		return -1
	}, name)
	for _, word := range []string{
		"cookie", "authorization", "token", "secret", "password", "passwd",
		"session", "signature", "credential", "apikey", "privatekey", "csrf", "xsrf",
	} {
		if strings.Contains(n, word) {
			return true
		}
	}
	return strings.HasSuffix(n, "key") || strings.HasSuffix(n, "auth")
}

// headerLine is one header value as shown.
type headerLine struct {
	Name     string
	Value    string
	Redacted bool
}

// redactHeader lists h's values in name order, with the values of
// sensitive headers replaced.
func redactHeader(h http.Header) []headerLine {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []headerLine
	for _, name := range names {
		hide := sensitiveName(name)
		for _, v := range h[name] {
			if hide {
				v = redacted
			}
			out = append(out, headerLine{Name: name, Value: v, Redacted: hide})
		}
	}
	return out
}
