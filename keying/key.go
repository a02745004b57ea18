package keying

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// The key and the scope of a request: its key templates and scope
// templates resolved against its Input (Template.Resolve, expand), and
// the rules a key must meet.

// DeriveKey tries the templates in order and returns the value of the first
// one that fully resolves, with its index. When none resolves it returns
// ("", -1, nil).
//
// When a template needs a body that is not valid JSON, DeriveKey stops there
// and returns an error wrapping ErrMalformedJSON with that template's index:
// a later template is not tried, because whether the failing one would have
// won cannot be known, and picking a later one could give one operation two
// different keys.
func DeriveKey(templates []Template, in *Input) (key string, idx int, err error) {
	for i, t := range templates {
		v, ok, err := t.Resolve(in)
		if err != nil {
			return "", i, fmt.Errorf("key template %q: %w", t.src, err)
		}
		if ok {
			return v, i, nil
		}
	}
	return "", -1, nil
}

// Resolve returns the template's value for in as a key, and whether every
// placeholder resolved to a non-empty value (a template of literal text
// only is always ok). Placeholders that do not resolve contribute "" to
// value.
//
// err is non-nil when a {body.*} placeholder needs a body that is not
// valid JSON (wrapping ErrMalformedJSON), or when a {header.*} placeholder
// names a header that cannot carry a key (wrapping ErrInvalidKey: two
// field lines, a comma in a bare value, a malformed Structured Field
// string); value is then "" and ok false. An empty (or all white space)
// body is not an error: its body placeholders just do not resolve.
func (t Template) Resolve(in *Input) (value string, ok bool, err error) {
	value, ok, err = t.expandWith(in.lookupKey)
	if err != nil {
		return "", false, err
	}
	return value, ok, nil
}

// expand resolves the template as a scope: headers are read leniently
// (the first field line, unquoted when it is a Structured Field string).
// On error it still returns the value with the failing placeholders as "".
func (t Template) expand(in *Input) (value string, ok bool, err error) {
	return t.expandWith(in.lookup)
}

// expandWith resolves the template's parts with lookup.
func (t Template) expandWith(lookup func(part) (string, error)) (value string, ok bool, err error) {
	switch len(t.parts) {
	case 0:
		return "", false, nil
	case 1:
		v, err := lookup(t.parts[0])
		return v, v != "" && err == nil, err
	}
	var stack [8]string
	vals := stack[:0]
	if len(t.parts) > len(stack) {
		vals = make([]string, 0, len(t.parts))
	}
	ok = true
	n := 0
	for _, p := range t.parts {
		v, e := lookup(p)
		if e != nil && err == nil {
			err = e
		}
		if v == "" {
			ok = false
		}
		vals = append(vals, v)
		n += len(v)
	}
	var b strings.Builder
	b.Grow(n)
	for _, v := range vals {
		b.WriteString(v)
	}
	return b.String(), ok && err == nil, err
}

// MaxKeyLen is the longest valid key, in bytes.
const MaxKeyLen = 255

// ErrInvalidKey is wrapped by every error ValidateKey returns.
var ErrInvalidKey = errors.New("invalid idempotency key")

// ValidateKey checks a derived key: 1 to MaxKeyLen bytes, each visible ASCII
// (0x21..0x7E; space is not allowed). The error wraps ErrInvalidKey and names
// the problem and the 0-based byte position, never the key itself.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: too long: %d > %d bytes", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 0x21 && c <= 0x7e:
		case c == ' ':
			return fmt.Errorf("%w: space at position %d", ErrInvalidKey, i)
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("%w: control character 0x%02x at position %d", ErrInvalidKey, c, i)
		default:
			return fmt.Errorf("%w: non-ASCII byte 0x%02x at position %d", ErrInvalidKey, c, i)
		}
	}
	return nil
}

const (
	scopeDomain  = "idemgate-scope-v1\x00"
	senderDomain = "idemgate-sender-v1\x00"
)

// SenderScope is the scope of a request whose signature a route verified
// when the route sets no scope of its own: the SHA-256 of the verified
// sender's identity, in a domain of its own, so it never equals a
// ScopeHash.
func SenderScope(sender string) [32]byte {
	return sha256.Sum256([]byte(senderDomain + sender))
}

// ScopeHash resolves the scope templates (placeholders that do not resolve,
// including body placeholders over a body that is not JSON, become "") and
// returns the SHA-256 of the results. Each value is length-prefixed, so
// ["ab", "c"] and ["a", "bc"] differ; an empty scope list has a fixed hash.
func ScopeHash(scope []Template, in *Input) [32]byte {
	var stack [256]byte
	buf := append(stack[:0], scopeDomain...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(scope)))
	for _, t := range scope {
		v, _, _ := t.expand(in)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
		buf = append(buf, v...)
	}
	return sha256.Sum256(buf)
}
