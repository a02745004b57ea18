package console

import (
	"net/http"
	"slices"

	"github.com/idemgate/idemgate/operator"
)

// sensitiveName reports whether a header name or a JSON member name looks
// like it carries a credential: the rule the admin API uses too
// (operator.IsCredentialHeader), so both hide exactly the same things.
func sensitiveName(name string) bool { return operator.IsCredentialHeader(name) }

// headerLine is one header value as shown.
type headerLine struct {
	Name     string
	Value    string
	Redacted bool
}

// redactHeader lists h's values in name order, redacted as the admin API
// redacts them (operator.RedactHeader).
func redactHeader(h http.Header) []headerLine {
	h = operator.RedactHeader(h)
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []headerLine
	for _, name := range names {
		hide := sensitiveName(name)
		for _, v := range h[name] {
			out = append(out, headerLine{Name: name, Value: v, Redacted: hide})
		}
	}
	return out
}
