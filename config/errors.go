package config

import (
	"fmt"
	"strconv"
	"strings"
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
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		b.WriteString(e.File)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	case e.File != "":
		b.WriteString(e.File)
		b.WriteString(": ")
	case e.Line > 0:
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in one set of rules, in document order
// when the rules came from a file. Load, Parse, Validate and Resolve return
// an ErrorList (never an empty one) when the rules are invalid; use
// errors.As to get at it, or at the first *Error.
type ErrorList []*Error

// Error returns the problems, one per line.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
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

// err returns l as an error, or nil when l is empty.
func (l ErrorList) err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// errorList collects problems while checking rules.
type errorList struct {
	list     ErrorList
	fromJSON bool // the rules came from JSON or Go, not YAML
}

func (c *errorList) add(field, format string, args ...any) {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	c.list = append(c.list, &Error{Field: field, Msg: msg})
}

// quote returns s quoted as a Go string, shortened when it is long, so that
// a huge value does not flood an error message.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
