package config

import (
	"cmp"
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

// errorList collects the problems found in rules, with the lines of the
// fields of a YAML file.
type errorList struct {
	list   ErrorList
	warns  ErrorList       // what is allowed but probably wrong (see Rules.Warnings)
	lines  map[string]int  // field path → line in the file; nil for JSON or Go
	failed map[string]bool // fields of the file that did not decode
}

func (c *errorList) isWritten(field string) bool { _, ok := c.lines[field]; return ok }

// add records a problem at field, on the line of the field or of its
// closest parent that has one, unless one of them failed to decode: the
// problem is then a consequence.
func (c *errorList) add(field, format string, args ...any) {
	c.record(&c.list, field, format, args...)
}

// warn records a warning at field, as add records a problem.
func (c *errorList) warn(field, format string, args ...any) {
	c.record(&c.warns, field, format, args...)
}

func (c *errorList) record(list *ErrorList, field, format string, args ...any) {
	line := 0
	for f := field; !c.failed[f]; f = parent(f) {
		line = cmp.Or(line, c.lines[f])
		if f == "" {
			*list = append(*list, &Error{Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
			return
		}
	}
}

// parent returns the field holding field: "routes[1]" for "routes[1].ttl",
// "routes" for "routes[1]", "" for "routes".
func parent(field string) string { return field[:max(strings.LastIndexAny(field, ".["), 0)] }

// quote returns s quoted as a Go string, cut to 64 characters so that a
// huge value does not flood an error message.
func quote(s string) string {
	if utf8.RuneCountInString(s) > 64 {
		return fmt.Sprintf("%.64q...", s)
	}
	return strconv.Quote(s)
}
