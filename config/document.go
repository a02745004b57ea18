package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Document is a YAML file decoded strictly into a Go struct, the way the
// route rules are (field names are the JSON names, each set once, values
// of the right kind), for other files that want the same errors: the drill
// file of `idemgate drill`. Add records the problems its own validation
// finds, at the line of the field (or of its closest written parent).
type Document struct {
	name string
	d    decoder
}

// DecodeDocument decodes data, one YAML document holding a mapping, into
// v, a pointer to a struct; what and shape name the document and the
// mapping it must be in errors ("the drill file", "a mapping with
// upstream, rules, route and request"). name is the file name used in error messages. Decoding goes as
// far as it can, so that Err reports every problem of a run.
func DecodeDocument(name string, data []byte, v any, what, shape string) *Document {
	doc := &Document{name: name}
	doc.d, doc.d.list, _ = decodeDocument(data, reflect.ValueOf(v).Elem(), what, shape)
	return doc
}

// Add records a problem at field (a path such as "request.headers"), on
// its line, unless the field or a parent failed to decode: the problem is
// then a consequence of one already reported.
func (doc *Document) Add(field, format string, args ...any) { doc.d.add(field, format, args...) }

// Written reports whether field was written in the file.
func (doc *Document) Written(field string) bool { return doc.d.isWritten(field) }

// Failed reports whether any problem has been found.
func (doc *Document) Failed() bool { return len(doc.d.list) > 0 }

// Err returns the problems found, an ErrorList naming file, line and field
// in document order, or nil.
func (doc *Document) Err() error {
	if len(doc.d.list) == 0 {
		return nil
	}
	return located(doc.name, doc.d.list)
}

// decodeDocument decodes the single YAML document in data into v strictly,
// with the lines of its fields; what and shape name the document and the
// mapping it must be. The returned decoder carries those lines for later
// problems; ok is false when data is not one YAML mapping (or null).
func decodeDocument(data []byte, v reflect.Value, what, shape string) (d decoder, errs ErrorList, ok bool) {
	d = decoder{errorList{lines: map[string]int{}, failed: map[string]bool{}}, 0}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, next yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return d, yamlError(err, data), false
	}
	switch err := dec.Decode(&next); {
	case err != nil && !errors.Is(err, io.EOF):
		return d, yamlError(err, data), false
	case err == nil:
		if len(next.Content) > 0 {
			next = *next.Content[0]
		}
		return d, ErrorList{{Line: next.Line, Msg: "a second YAML document; " + what + " must be one document"}}, false
	}
	// A document has fewer values than bytes, but aliases can multiply them.
	d.budget = 1<<14 + len(data)
	if len(doc.Content) > 0 {
		switch root := doc.Content[0]; {
		case root.Kind == yaml.MappingNode:
			d.lines[""] = root.Line
			d.mapping(root, v, "")
		case root.ShortTag() != "!!null":
			return d, ErrorList{{Line: root.Line, Msg: what + " must be " + shape + ", not " + describeNode(root)}}, false
		}
	}
	return d, d.list, true
}

// located names the file in every problem, sorts them by line and keeps
// the first maxErrors, counting the rest in one last entry.
func located(name string, errs ErrorList) ErrorList {
	for _, e := range errs {
		e.File = name
	}
	slices.SortStableFunc(errs, func(a, b *Error) int { return a.Line - b.Line })
	if len(errs) > maxErrors {
		more := &Error{File: name, Line: max(errs[maxErrors].Line, 1),
			Msg: fmt.Sprintf("and %d more problems", len(errs)-maxErrors)}
		errs = append(errs[:maxErrors:maxErrors], more)
	}
	return errs
}
