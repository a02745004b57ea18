package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The check a claim keeps on its record: the lookup that asks the
// upstream whether the operation took effect (see verification.go for
// the check's lease and verdict, and the verdicts).

// Check is a resolved lookup: the request that asks the upstream whether
// the operation took effect. It carries no headers (those come from the
// route's config when the check runs, and may be secret).
type Check struct {
	Method string
	URL    string
	// After is how long after the record is held the first scheduled
	// check is due.
	After time.Duration
	// Match lists the values the lookup's answer must hold for the
	// operation to be found (the route's found.match, resolved from the
	// request), sorted by path; nil for none.
	Match []CheckMatch
}

// CheckMatch is a value a lookup's answer must hold: the text at a JSON
// path (gjson syntax).
type CheckMatch struct {
	Path  string
	Value string
}

// Limits of a check's Match.
const (
	MaxCheckMatches    = 16
	MaxCheckMatchPath  = 256
	MaxCheckMatchValue = 1024
)

// IsZero reports whether c is no check.
func (c Check) IsZero() bool { return c.URL == "" }

// Validate checks a claim's check as every engine must: none, or a
// method that is an HTTP token, a URL without white space or control
// characters (at most 4096 bytes), and an After that is not negative.
func (c Check) Validate() error {
	if c.IsZero() {
		if c.Method != "" {
			return fmt.Errorf("%w: check: a method without a URL", ErrInvalidArgument)
		}
		return nil
	}
	switch {
	case !isToken(c.Method):
		return fmt.Errorf("%w: check: method %q is not an HTTP method", ErrInvalidArgument, c.Method)
	case len(c.URL) > 4096 || strings.ContainsFunc(c.URL, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("%w: check: the URL is longer than 4096 bytes or has white space or control characters", ErrInvalidArgument)
	case c.After < 0:
		return fmt.Errorf("%w: check: negative after", ErrInvalidArgument)
	case len(c.Match) > MaxCheckMatches:
		return fmt.Errorf("%w: check: more than %d match values", ErrInvalidArgument, MaxCheckMatches)
	}
	for _, m := range c.Match {
		if m.Path == "" || len(m.Path) > MaxCheckMatchPath || len(m.Value) > MaxCheckMatchValue || !utf8.ValidString(m.Path) || !utf8.ValidString(m.Value) {
			return fmt.Errorf("%w: check: a match path must be 1 to %d bytes and its value at most %d, both UTF-8", ErrInvalidArgument, MaxCheckMatchPath, MaxCheckMatchValue)
		}
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// Normalized is c as a record gives it back: After in whole
// milliseconds, no empty Match.
func (c Check) Normalized() Check {
	if c.IsZero() {
		return Check{}
	}
	c.After = time.Duration(Millis(c.After)) * time.Millisecond
	if len(c.Match) == 0 {
		c.Match = nil
	}
	return c
}

// EncodeCheckMatch encodes match values for an engine to store: a JSON
// array of [path, value] pairs ("" for none).
func EncodeCheckMatch(m []CheckMatch) string {
	if len(m) == 0 {
		return ""
	}
	pairs := make([][2]string, len(m))
	for i, v := range m {
		pairs[i] = [2]string{v.Path, v.Value}
	}
	b, _ := json.Marshal(pairs)
	return string(b)
}

// DecodeCheckMatch decodes what EncodeCheckMatch made; nil for "" (and
// for text it never made, which then matches nothing and is no check of
// anything: see caddymodule's lookup).
func DecodeCheckMatch(s string) []CheckMatch {
	if s == "" {
		return nil
	}
	var pairs [][2]string
	if json.Unmarshal([]byte(s), &pairs) != nil {
		return []CheckMatch{{Path: "", Value: s}}
	}
	m := make([]CheckMatch, len(pairs))
	for i, p := range pairs {
		m[i] = CheckMatch{Path: p[0], Value: p[1]}
	}
	return m
}
