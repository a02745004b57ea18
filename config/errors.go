package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is one problem found in route rules. File and Line are set when
// the rules came from a file (Load, Parse), not by Validate and Resolve,
// which check rules that may come from Caddy's JSON.
type Error struct {
	File  string // name of the rules file, as given to Load or Parse
	Line  int    // 1-based line in File; 0 when unknown
	Field string // field path such as "routes[0].key[2]"; "" for the whole document
	Msg   string // what is wrong
}

// Error formats the problem as "file:line: field: message", leaving out the
// parts that are not known.
func (e *Error) Error() string {
	s := e.Msg
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	switch {
	case e.File != "" && e.Line > 0:
		s = e.File + ":" + strconv.Itoa(e.Line) + ": " + s
	case e.File != "":
		s = e.File + ": " + s
	case e.Line > 0:
		s = "line " + strconv.Itoa(e.Line) + ": " + s
	}
	return s
}

// ErrorList is every problem found in one set of rules, in document order
// when they came from a file: what Load, Parse, Validate and Resolve return
// for invalid rules (use errors.As to get at it, or at the first *Error).
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
	list    ErrorList
	written map[string]int // fields set in the YAML file; nil for JSON or Go
}

func (c *errorList) isWritten(field string) bool { _, ok := c.written[field]; return ok }

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
