package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is one problem found in route rules.
//
// Field is the path of the offending field in the rules document, such as
// "routes[1].on_unknown_outcome", "defaults.ttl" or "routes[0].key[2]".
// File and Line are set when the rules came from a file (Load, Parse);
// Validate and Resolve, which check rules that may come from Caddy's JSON,
// leave them empty.
type Error struct {
	File  string // name of the rules file, as given to Load or Parse
	Line  int    // 1-based line in File; 0 when unknown
	Field string // field path; "" for problems of the whole document
	Msg   string // what is wrong
}

// Error formats the problem as "file:line: field: message", leaving out the
// parts that are not known:
//
//	routes.yaml:9: routes[1].on_unknown_outcome: "maybe" is not one of hold, release, store
//	routes[1].on_unknown_outcome: "maybe" is not one of hold, release, store
func (e *Error) Error() string {
	s := e.Msg
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	switch line := strconv.Itoa(e.Line); {
	case e.File != "" && e.Line > 0:
		return e.File + ":" + line + ": " + s
	case e.File != "":
		return e.File + ": " + s
	case e.Line > 0:
		return "line " + line + ": " + s
	}
	return s
}

// ErrorList is every problem found in one set of rules, in document order
// when the rules came from a file. Load, Parse, Validate and Resolve return
// an ErrorList (never an empty one) when the rules are invalid; use
// errors.As to get at it, or at the first *Error.
type ErrorList []*Error

// Error returns the problems, one per line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the problems as a slice of errors, for errors.Is and
// errors.As.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// errorList collects problems while checking rules.
type errorList struct {
	list     ErrorList
	fromJSON bool // the rules came from JSON or Go, not YAML
}

func (c *errorList) add(field, format string, args ...any) {
	c.list = append(c.list, &Error{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// quote returns s quoted as a Go string, shortened when it is long, so that
// a huge value does not flood an error message.
func quote(s string) string {
	if len(s) <= 64 {
		return strconv.Quote(s)
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
